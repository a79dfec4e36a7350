package auth

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// watchedFile is the parsed content of a file, parsed again when the
// file's modification time or size changes. A file that cannot be read
// or parsed any more keeps the content last parsed (and the error is
// returned, so that it is logged).
type watchedFile[T any] struct {
	path, what string
	parse      func([]byte) (T, error)

	mu      sync.Mutex
	modTime time.Time
	size    int64
	val     T
}

func newWatchedFile[T any](path, what string, parse func([]byte) (T, error)) (*watchedFile[T], error) {
	w := &watchedFile[T]{path: path, what: what, parse: parse}
	if err := w.reloadLocked(); err != nil {
		return nil, err
	}
	return w, nil
}

// get returns the content, rereading the file if it changed.
func (w *watchedFile[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.reloadLocked()
	return w.val, err
}

func (w *watchedFile[T]) reloadLocked() error {
	st, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("auth: %s: %w", w.what, err)
	}
	if !w.modTime.IsZero() && st.ModTime().Equal(w.modTime) && st.Size() == w.size {
		return nil
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		return fmt.Errorf("auth: %s: %w", w.what, err)
	}
	v, err := w.parse(b)
	if err != nil {
		return err
	}
	w.val, w.modTime, w.size = v, st.ModTime(), st.Size()
	return nil
}
