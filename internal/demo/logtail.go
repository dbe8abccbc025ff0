package demo

import (
	"strings"
	"sync"
)

// logTail keeps the last lines written to it, so the relay's warnings stay off the status screen
// and can still be shown when the relay fails. zerolog writes one event per Write.
type logTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func newLogTail(max int) *logTail { return &logTail{max: max} }

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	if over := len(t.lines) - t.max; over > 0 {
		t.lines = append(t.lines[:0], t.lines[over:]...)
	}
	return len(p), nil
}

// String returns the kept lines, oldest first.
func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// last returns the last n kept lines, oldest first.
func (t *logTail) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines[max(len(t.lines)-n, 0):], "\n")
}
