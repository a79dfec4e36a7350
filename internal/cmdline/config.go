package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ConfigFile is what --config names: a JSON or YAML file whose keys are
// the command's long flag names and the extra keys it declared. A flag
// set on the command line or in the environment wins over the file; the
// file wins over the flag's default.
type ConfigFile struct {
	// Path is the file --config named; empty without one.
	Path string
	// Extra holds the file's extra keys (see Flags.Config), as JSON.
	Extra map[string]json.RawMessage

	extra []string
}

// Config adds --config to f and returns what Parse reads from the file.
// extra names keys the file may hold besides the flags (such as a
// worker's "servers"); they are returned in ConfigFile.Extra for the
// command to decode.
func (f *Flags) Config(extra ...string) *ConfigFile {
	c := &ConfigFile{extra: extra}
	usage := "JSON or YAML `file` of settings: its keys are the long flag names"
	if len(extra) > 0 {
		usage += " and " + strings.Join(extra, ", ")
	}
	usage += " (docs/config.md); flags and MCPCANCEL_* variables win over it"
	f.FlagSet.StringVar(&c.Path, "config", "", usage)
	f.config = c
	return c
}

// fromFile sets the flags neither the command line nor the environment
// set from the --config file, if one is named.
func (f *Flags) fromFile() error {
	if f.config == nil || f.config.Path == "" {
		return nil
	}
	file := f.config.Path
	keys, err := readConfig(file)
	if err != nil {
		return usageError{fmt.Errorf("--config %s: %w", file, err)}
	}
	if err := f.checkKeys(file, keys); err != nil {
		return usageError{err}
	}
	given := map[string]bool{}
	f.FlagSet.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.config.Extra = map[string]json.RawMessage{}
	for _, k := range sortedKeys(keys) {
		if slices.Contains(f.config.extra, k) {
			f.config.Extra[k] = keys[k]
			continue
		}
		if given[k] {
			continue
		}
		if err := f.setFromFile(file, k, keys[k]); err != nil {
			return usageError{err}
		}
	}
	return nil
}

// checkKeys refuses a key that is neither a flag nor an extra key, naming
// the keys there are: a typo must not silently change nothing.
func (f *Flags) checkKeys(file string, keys map[string]json.RawMessage) error {
	var valid []string
	f.FlagSet.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "config" {
			valid = append(valid, fl.Name)
		}
	})
	valid = append(valid, f.config.extra...)
	slices.Sort(valid)
	var unknown []string
	for _, k := range sortedKeys(keys) {
		if slices.Contains(valid, k) {
			continue
		}
		if near := nearest(k, valid); near != "" {
			unknown = append(unknown, fmt.Sprintf("%q (did you mean %q?)", k, near))
		} else {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	what := "key"
	if len(unknown) > 1 {
		what = "keys"
	}
	return fmt.Errorf("%s: unknown %s %s for mcpcancel %s; the keys are the long flag names: %s",
		file, what, strings.Join(unknown, ", "), f.FlagSet.Name(), strings.Join(valid, ", "))
}

// nearest is the key of keys within two edits of k, the first of the
// closest; "" if none is.
func nearest(k string, keys []string) string {
	best, dist := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < dist {
			best, dist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return prev[len(b)]
}

func (f *Flags) setFromFile(file, key string, raw json.RawMessage) error {
	v, err := flagValue(raw)
	if err != nil {
		return fmt.Errorf("%s: %s: %v", file, key, err)
	}
	if err := f.FlagSet.Set(key, v); err != nil {
		return fmt.Errorf("%s: %s: invalid value %q for --%s: %v", file, key, v, key, err)
	}
	return nil
}

// flagValue is a file's value as a flag's text: a string as it is, a
// number or boolean as written, a list of them joined with commas (for
// the flags that take comma-separated lists).
func flagValue(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", errors.New("no value: give one, or leave the key out")
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case raw[0] == '{':
		return "", errors.New("an object where the flag takes a value")
	case raw[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return "", err
		}
		vs := make([]string, len(items))
		for i, it := range items {
			v, err := flagValue(it)
			if err != nil || bytes.HasPrefix(bytes.TrimSpace(it), []byte("[")) {
				return "", fmt.Errorf("item %d of the list is not a string, number or boolean", i+1)
			}
			vs[i] = v
		}
		return strings.Join(vs, ","), nil
	}
	return string(raw), nil // a number, true or false, as written
}

// readConfig reads a settings file: JSON if its name ends in .json, YAML
// if in .yaml or .yml. Its top level must be an object.
func readConfig(file string) (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, unwrapPath(err)
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".json":
	case ".yaml", ".yml":
		if b, err = yaml.YAMLToJSON(b); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("the file's name must end in .json, .yaml or .yml, which says how to read it")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var keys map[string]json.RawMessage
	if err := dec.Decode(&keys); err != nil {
		return nil, fmt.Errorf("not a JSON object of settings: %w", err)
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the object of settings")
	}
	if keys == nil {
		return nil, errors.New("the file is empty: want an object of settings")
	}
	return keys, nil
}

// unwrapPath drops the path from a file error; the caller names the file.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
