package clientcmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// barWidth is how many cells the progress bar has.
const barWidth = 24

// progressView shows a call's notifications/progress: on a terminal as a
// bar redrawn in place, else as one line each.
type progressView struct {
	w   io.Writer
	tty bool

	mu    sync.Mutex
	drawn bool // a bar is on its line, and the line is not ended
	done  bool // the call ended; later notifications are not shown
}

func newProgressView(w io.Writer) *progressView {
	return &progressView{w: w, tty: isTerminal(w)}
}

// isTerminal says whether w is a terminal (or another character device,
// like /dev/null, where a redrawn bar does no harm).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (v *progressView) show(p *mcp.ProgressNotificationParams) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done {
		return
	}
	if !v.tty {
		fmt.Fprintln(v.w, strings.TrimSpace("progress "+progressCount(p)+" "+p.Message))
		return
	}
	fmt.Fprintf(v.w, "\r%s\x1b[K", strings.TrimSpace(progressBar(p)+" "+progressCount(p)+" "+p.Message))
	v.drawn = true
}

// finish ends the bar's line, if one is drawn.
func (v *progressView) finish() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.drawn {
		fmt.Fprintln(v.w)
	}
	v.done = true
}

// progressCount is "3/10", or "3" when the total is unknown.
func progressCount(p *mcp.ProgressNotificationParams) string {
	if p.Total > 0 {
		return fmt.Sprintf("%g/%g", p.Progress, p.Total)
	}
	return fmt.Sprintf("%g", p.Progress)
}

// progressBar is "[#########...............]", or "" when the total is
// unknown.
func progressBar(p *mcp.ProgressNotificationParams) string {
	if p.Total <= 0 {
		return ""
	}
	n := min(max(int(p.Progress/p.Total*barWidth), 0), barWidth)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", barWidth-n) + "]"
}

// printResult prints a tool's result: with asJSON, all of it as JSON;
// else its text content blocks as lines, other blocks as JSON, and the
// structured content as JSON if there is no content.
func printResult(w io.Writer, res *mcp.CallToolResult, asJSON bool) error {
	if asJSON {
		return printJSON(w, res)
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Fprintln(w, t.Text)
			continue
		}
		if err := printJSON(w, c); err != nil {
			return err
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		return printJSON(w, res.StructuredContent)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cannot print the result as JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
