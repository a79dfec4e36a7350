// Command ociimage builds mcpcancel's container image as an OCI image
// layout, without a Docker daemon or a registry, and extracts the binary
// back out of it; scripts/release-snapshot.sh runs it. The image is the
// Dockerfile's: a static binary at /usr/local/bin/mcpcancel on an empty
// base, with CA certificates, /tmp, and a non-root user (65532).
//
//	ociimage build -o DIR -version V -revision SHA -epoch UNIX -certs FILE linux/amd64=BIN ...
//	ociimage extract -platform linux/amd64 -o FILE DIR
//
// Every timestamp is -epoch (the commit's time), so the same inputs make
// the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const binPath = "usr/local/bin/mcpcancel"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: ociimage build|extract ...")
	}
	switch args[0] {
	case "build":
		return build(args[1:])
	case "extract":
		return extract(args[1:])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fs.String("o", "", "the OCI layout directory to write")
	version := fs.String("version", "", "the release the binaries print")
	revision := fs.String("revision", "", "the commit built")
	epoch := fs.Int64("epoch", 0, "the time of every file and of the image (Unix seconds)")
	certs := fs.String("certs", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates to include")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *version == "" || fs.NArg() == 0 {
		return errors.New("build needs -o, -version and at least one OS/ARCH=BINARY")
	}
	ca, err := os.ReadFile(*certs)
	if err != nil {
		return err
	}
	at := time.Unix(*epoch, 0).UTC()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range fs.Args() {
		plat, bin, ok := strings.Cut(a, "=")
		os_, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 {
			return fmt.Errorf("%q is not OS/ARCH=BINARY", a)
		}
		img, err := image(bin, ca, at, *version, *revision, os_, arch)
		if err != nil {
			return fmt.Errorf("%s: %w", plat, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os_, Architecture: arch}},
		})
	}
	idx = mutate.Annotations(idx, map[string]string{"org.opencontainers.image.ref.name": *version}).(v1.ImageIndex)
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	_, err = layout.Write(*out, idx)
	return err
}

// image is one platform's image: one layer on an empty base.
func image(bin string, ca []byte, at time.Time, version, revision, os_, arch string) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layer, err := rootfs(exe, ca, at)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = os_, arch, v1.Time{Time: at}
	cf.Config = v1.Config{
		User:         "65532:65532",
		Env:          []string{"HOME=/home/nonroot", "PATH=/usr/local/bin"},
		Entrypoint:   []string{"/" + binPath},
		Cmd:          []string{"help"},
		ExposedPorts: map[string]struct{}{"7800/tcp": {}, "7801/tcp": {}, "7802/tcp": {}, "7900/tcp": {}, "9090/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "mcpcancel",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": revision,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the image's one layer, as the Dockerfile's final stage lays it out.
func rootfs(exe, ca []byte, at time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: at})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: at}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	steps := []error{
		dir("etc", 0o755, 0), dir("etc/ssl", 0o755, 0), dir("etc/ssl/certs", 0o755, 0),
		file("etc/ssl/certs/ca-certificates.crt", 0o644, ca),
		file("etc/passwd", 0o644, []byte("nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")),
		file("etc/group", 0o644, []byte("nonroot:x:65532:\n")),
		dir("home", 0o755, 0), dir("home/nonroot", 0o700, 65532),
		dir("tmp", 0o1777, 0),
		dir("usr", 0o755, 0), dir("usr/local", 0o755, 0), dir("usr/local/bin", 0o755, 0),
		file(binPath, 0o755, exe),
		tw.Close(),
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func extract(args []string) error {
	fs := flag.NewFlagSet("extract", flag.ContinueOnError)
	platform := fs.String("platform", "linux/amd64", "the image of the index to read")
	out := fs.String("o", "", "where to write the binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 1 {
		return errors.New("extract needs -o FILE and the layout directory")
	}
	idx, err := layout.ImageIndexFromPath(fs.Arg(0))
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS+"/"+d.Platform.Architecture == *platform {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return err
			}
			return writeBinary(img, *out)
		}
	}
	return fmt.Errorf("no %s image in %s", *platform, fs.Arg(0))
}

// writeBinary finds mcpcancel in img's filesystem and writes it to out.
func writeBinary(img v1.Image, out string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("no /%s in the image: %w", binPath, err)
		}
		if strings.TrimPrefix(h.Name, "/") == binPath {
			f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			return errors.Join(err, f.Close())
		}
	}
}
