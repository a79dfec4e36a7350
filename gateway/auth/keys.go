package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// Bounds on a key set, wherever it comes from.
const (
	defaultMaxKeys     = 64
	defaultMaxJWKSSize = 1 << 20
)

// parseKeySet reads a JWK set (RFC 7517) with jwkset and keeps the keys
// a token may be verified with: "use" absent or "sig", a supported type,
// strong enough. A malformed or weak supported key is an error, as is a
// set with more than maxKeys keys or with no usable key. Private parts of
// asymmetric keys are ignored.
func parseKeySet(b []byte, maxKeys int) ([]jwkset.JWK, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK set: %w", err)
	}
	if len(set.Keys) > maxKeys {
		return nil, fmt.Errorf("%d keys, more than the limit of %d", len(set.Keys), maxKeys)
	}
	var keys []jwkset.JWK
	for i, m := range set.Keys {
		if m.USE != "" && m.USE != jwkset.UseSig {
			continue
		}
		if m.KTY != jwkset.KtyOct {
			m.D, m.P, m.Q, m.DP, m.DQ, m.QI, m.OTH = "", "", "", "", "", "", nil
		}
		m.X5U = "" // never fetched
		k, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{Private: true}, jwkset.JWKValidateOptions{})
		if errors.Is(err, jwkset.ErrUnsupportedKey) {
			continue
		}
		if err == nil {
			err = strongEnough(k.Key())
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, m.KID, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no signing key of a supported type (oct, RSA, EC P-256/384/521, Ed25519)")
	}
	return keys, nil
}

// strongEnough refuses keys too weak to trust: HMAC secrets under 256
// bits and RSA moduli under 2048 bits. Curve points were checked by
// jwkset.
func strongEnough(key any) error {
	switch k := key.(type) {
	case []byte:
		if len(k) < 32 {
			return errors.New(`an HMAC secret ("k") must be at least 32 bytes`)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return errors.New("an RSA modulus must be at least 2048 bits")
		}
	case *ecdsa.PublicKey, ed25519.PublicKey:
	default:
		return fmt.Errorf("unsupported key type %T", key)
	}
	return nil
}

// fileKeys is a key set read from a file, read again when the file
// changes (checked on every use: a stat).
type fileKeys struct {
	*jwkset.MemoryJWKSet
	file *watchedFile[[]jwkset.JWK]
}

func newFileKeys(path string, maxKeys int) (*fileKeys, error) {
	parse := func(b []byte) ([]jwkset.JWK, error) {
		keys, err := parseKeySet(b, maxKeys)
		if err != nil {
			return nil, fmt.Errorf("auth: JWKS file: %w", err)
		}
		return keys, nil
	}
	w, err := newWatchedFile(path, "JWKS file", parse)
	if err != nil {
		return nil, err
	}
	return &fileKeys{MemoryJWKSet: jwkset.NewMemoryStorage(), file: w}, nil
}

// sync loads the file's keys, if it changed; it returns the error of a
// file that can no longer be read (the last keys stay in use).
func (f *fileKeys) sync(ctx context.Context) error {
	keys, err := f.file.get()
	f.MemoryJWKSet.KeyReplaceAll(ctx, keys)
	return err
}

// KeyRead implements jwkset.Storage.
func (f *fileKeys) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	f.sync(ctx)
	return f.MemoryJWKSet.KeyRead(ctx, kid)
}

// KeyReadAll implements jwkset.Storage.
func (f *fileKeys) KeyReadAll(ctx context.Context) ([]jwkset.JWK, error) {
	f.sync(ctx)
	return f.MemoryJWKSet.KeyReadAll(ctx)
}

// remoteKeys is a key set fetched from a JWKS URL: once at the start,
// every refresh interval in the background, and when a token names a
// kid the set does not hold, at most once per floor (so a flood of
// tokens with made-up kids costs the identity provider one request per
// floor). Concurrent lookups of an unknown kid share one fetch. A fetch
// that fails, or brings a set that is too large or has no usable key,
// keeps the keys fetched last.
type remoteKeys struct {
	*jwkset.MemoryJWKSet
	url      string
	client   *http.Client
	maxBytes int64
	maxKeys  int
	floor    *rate.Limiter
	log      *slog.Logger
	flight   singleflight.Group

	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// fetchTimeout bounds one fetch of a key set or of issuer metadata.
const fetchTimeout = 10 * time.Second

func newRemoteKeys(ctx context.Context, url string, o *JWTOptions) (*remoteKeys, error) {
	r := &remoteKeys{
		MemoryJWKSet: jwkset.NewMemoryStorage(), url: url, client: o.HTTPClient,
		maxBytes: o.MaxJWKSBytes, maxKeys: o.MaxKeys, log: o.Logger,
		floor: rate.NewLimiter(rate.Every(o.RefreshFloor), 1), done: make(chan struct{}),
	}
	if err := r.fetch(ctx); err != nil {
		return nil, fmt.Errorf("auth: JWKS %s: %w", url, err)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	go r.refreshEvery(bg, o.RefreshInterval) // owned: Close stops it and waits
	return r, nil
}

func (r *remoteKeys) refreshEvery(ctx context.Context, every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err, _ := r.flight.Do("fetch", func() (any, error) { return nil, r.fetch(ctx) }); err != nil && ctx.Err() == nil {
			r.log.Warn("refreshing the JWKS failed; keeping the keys fetched last", "url", r.url, "err", err)
		}
	}
}

// Close stops the background refresh and waits for it. Idempotent.
func (r *remoteKeys) Close() {
	r.once.Do(func() {
		r.stop()
		<-r.done
	})
}

// fetch gets the set and, if it is usable, replaces the keys with it.
func (r *remoteKeys) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	b, err := getLimited(ctx, r.client, r.url, r.maxBytes)
	if err != nil {
		return err
	}
	keys, err := parseKeySet(b, r.maxKeys)
	if err != nil {
		return err
	}
	return r.MemoryJWKSet.KeyReplaceAll(ctx, keys)
}

// KeyRead implements jwkset.Storage, refreshing on an unknown kid.
func (r *remoteKeys) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	k, err := r.MemoryJWKSet.KeyRead(ctx, kid)
	if !errors.Is(err, jwkset.ErrKeyNotFound) {
		return k, err
	}
	r.flight.Do("fetch", func() (any, error) {
		if !r.floor.Allow() {
			return nil, nil
		}
		r.log.Info("a token names an unknown key; fetching the JWKS again", "url", r.url, "kid", kid)
		err := r.fetch(context.WithoutCancel(ctx))
		if err != nil {
			r.log.Warn("fetching the JWKS failed; keeping the keys fetched last", "url", r.url, "err", err)
		}
		return nil, err
	})
	return r.MemoryJWKSet.KeyRead(ctx, kid)
}

// getLimited GETs url and returns its body, refusing a status other than
// 200 and a body over limit bytes.
func getLimited(ctx context.Context, c *http.Client, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: response larger than %d bytes", url, limit)
	}
	return b, nil
}
