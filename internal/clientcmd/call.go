package clientcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutCall = `Calls one tool over MCP, for trying and scripting mcpcancel:

  mcpcancel call [flags] TOOL [JSON-ARGS]

JSON-ARGS is a JSON object (default {}); flags may come before or after TOOL
and JSON-ARGS.

While the call runs, its notifications/progress show on stderr: as a bar on
a terminal, else one line each ("progress 3/10 slept step 3 of 10").
SIGINT (Ctrl-C), SIGTERM, --cancel-after or --timeout cancels the call: the
client sends notifications/cancelled (2025 revisions) or closes the call's
stream (2026-07-28), then asks the coordinator what the audit says about
the call. A second signal exits at once.

Prints the outcome on stdout: the result's content (text blocks as lines,
other blocks as JSON; with --json, the whole result as JSON), or "cancelled"
and then the call's audit record (with --json, as a JSON line).

Exit status:
  0    the tool returned a result
  1    failure: cannot connect, protocol error (e.g. an unknown tool),
       cannot read the audit
  2    usage error
  3    the tool returned an error result (isError)
  4    cancelled (by a signal, --cancel-after or --timeout)
  130  a second signal`

// Exit statuses of `call`, beside those of every command.
const (
	exitToolError = 3
	exitCancelled = 4
)

// Why a call was cancelled, when not by a signal.
var (
	errCancelAfter = errors.New("--cancel-after elapsed")
	errTimedOut    = errors.New("--timeout elapsed")
)

// progressToken names the call's progress notifications.
const progressToken = "mcpcancel-call"

type callFlags struct {
	mcp, stdioCmd, coordinator, protocol string
	cancelAfter, timeout                 time.Duration
	json, audit                          bool
	tls                                  tlsconfig.Files // an admin certificate, for the audit

	tool string
	args json.RawMessage
}

func (o *callFlags) register(f *cmdline.Flags) {
	f.StringVar(&o.mcp, "mcp", "http://127.0.0.1:7800/mcp", "`URL` of the MCP Streamable HTTP endpoint")
	f.StringVar(&o.stdioCmd, "stdio-cmd", "", "run this `command` (split at spaces) and speak MCP on its stdin/stdout instead of --mcp")
	f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address` to read the audit from after a cancellation")
	f.StringVar(&o.protocol, "protocol-version", "", "MCP protocol `version` to ask for, e.g. 2025-11-25; empty: the newest both sides speak")
	f.DurationVar(&o.cancelAfter, "cancel-after", 0, "cancel the call this long after sending it; 0 never")
	f.DurationVar(&o.timeout, "timeout", 0, "cancel the call if it has not ended this long after starting; 0 never")
	f.BoolVar(&o.json, "json", false, "print the result, or the audit record, as JSON")
	f.BoolVar(&o.audit, "audit", true, "after a cancellation, look the call up in the audit (HTTP only)")
	f.TLS(&o.tls)
}

func RunCall(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseCall(s, args)
	if err != nil {
		return err
	}
	code, err := o.run(ctx, s)
	if err == nil && code != cmdline.ExitOK {
		return cmdline.ExitCode(code) // 3 and 4 are call's own; the outcome is already printed
	}
	return err
}

func parseCall(s cmdline.Streams, args []string) (*callFlags, error) {
	o := &callFlags{}
	f := cmdline.NewFlags(s, "call", aboutCall)
	o.register(f)
	pos, err := f.ParseInterspersed(args)
	if err != nil {
		return nil, err
	}
	if err := o.positional(pos); err != nil {
		return nil, err
	}
	return o, o.check()
}

func (o *callFlags) positional(pos []string) error {
	switch len(pos) {
	case 0:
		return cmdline.Usage(errors.New("name the TOOL to call"))
	case 1:
		o.tool, o.args = pos[0], json.RawMessage("{}")
		return nil
	case 2:
		o.tool = pos[0]
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(pos[1]), &m); err != nil || m == nil {
			return cmdline.Usage(fmt.Errorf(`JSON-ARGS must be a JSON object, like '{"text":"hi"}', not %q`, pos[1]))
		}
		o.args = json.RawMessage(pos[1])
		return nil
	default:
		return cmdline.Usage(fmt.Errorf("unexpected argument %q", pos[2]))
	}
}

func (o *callFlags) check() error {
	switch {
	case o.tool == "":
		return cmdline.Usage(errors.New("the TOOL name is empty"))
	case o.cancelAfter < 0 || o.timeout < 0:
		return cmdline.Usage(errors.New("--cancel-after and --timeout must not be negative"))
	case !o.stdio() && o.mcp == "":
		return cmdline.Usage(errors.New("--mcp or --stdio-cmd names the server"))
	case o.protocol != "" && !slices.Contains(mcp.SupportedProtocolVersions(), o.protocol):
		return cmdline.Usage(fmt.Errorf("--protocol-version %q: want one of %s", o.protocol, strings.Join(mcp.SupportedProtocolVersions(), ", ")))
	}
	return nil
}

// stdio says whether the server is a command on stdio.
func (o *callFlags) stdio() bool { return strings.TrimSpace(o.stdioCmd) != "" }

// run makes the call and prints its outcome. It returns the exit status,
// and an error for statuses 1 and 2.
func (o *callFlags) run(ctx context.Context, s cmdline.Streams) (int, error) {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errTimedOut)
		defer cancel()
	}
	trace := newCallTrace()
	view := newProgressView(s.Stderr)
	cs, err := o.connect(ctx, s, trace, view)
	if err != nil {
		if ctx.Err() != nil {
			o.noteCancel(s, context.Cause(ctx), "before the call was sent")
			fmt.Fprintln(s.Stdout, "cancelled")
			return exitCancelled, nil
		}
		return cmdline.ExitFailed, o.connectErr(err)
	}
	defer cs.Close()
	res, err := o.call(ctx, cs)
	view.finish()
	switch {
	case err == nil:
		return o.result(s, res)
	case errors.Is(err, errCancelAfter), errors.Is(err, errTimedOut), ctx.Err() != nil:
		o.noteCancel(s, err, "")
		return o.cancelled(ctx, s, trace)
	default:
		return cmdline.ExitFailed, callErr(err)
	}
}

// connect opens the MCP session, over HTTP or to the --stdio-cmd command.
func (o *callFlags) connect(ctx context.Context, s cmdline.Streams, trace *callTrace, view *progressView) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpcancel-call", Version: cmdline.Version()}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params.ProgressToken == progressToken {
				view.show(r.Params)
			}
		},
	})
	return c.Connect(ctx, o.transport(s, trace), &mcp.ClientSessionOptions{ProtocolVersion: o.protocol})
}

func (o *callFlags) transport(s cmdline.Streams, trace *callTrace) mcp.Transport {
	if o.stdio() {
		argv := strings.Fields(o.stdioCmd)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stderr = s.Stderr
		ownProcessGroup(cmd) // Ctrl-C is for us to turn into a cancellation
		return &tracedTransport{Transport: &mcp.CommandTransport{Command: cmd}, trace: trace}
	}
	return &mcp.StreamableClientTransport{
		Endpoint:   o.mcp,
		HTTPClient: &http.Client{Transport: &traceRoundTripper{rt: http.DefaultTransport, trace: trace}},
		MaxRetries: -1,
	}
}

// call calls the tool, cancelling after --cancel-after. A cancelled call
// returns an error that is, or wraps, why.
func (o *callFlags) call(ctx context.Context, cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
	if o.cancelAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.cancelAfter, errCancelAfter)
		defer cancel()
	}
	params := &mcp.CallToolParams{Name: o.tool, Arguments: o.args}
	params.SetProgressToken(progressToken)
	res, err := cs.CallTool(ctx, params)
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return res, err
}

// result prints a result: its content, or with --json all of it.
func (o *callFlags) result(s cmdline.Streams, res *mcp.CallToolResult) (int, error) {
	if err := printResult(s.Stdout, res, o.json); err != nil {
		return cmdline.ExitFailed, err
	}
	if res.IsError {
		fmt.Fprintf(s.Stderr, "mcpcancel call: %s returned an error result\n", o.tool)
		return exitToolError, nil
	}
	return cmdline.ExitOK, nil
}

// noteCancel says on stderr why the call was cancelled, unless it was a
// signal (Main has said so), and when, if that is not obvious.
func (o *callFlags) noteCancel(s cmdline.Streams, why error, when string) {
	var msg string
	switch {
	case errors.Is(why, errTimedOut):
		msg = fmt.Sprintf("timed out after %v (--timeout); cancelled", o.timeout)
	case errors.Is(why, errCancelAfter):
		msg = fmt.Sprintf("cancelled after %v (--cancel-after)", o.cancelAfter)
	case when != "":
		msg = "cancelled"
	default:
		return
	}
	fmt.Fprintf(s.Stderr, "mcpcancel call: %s\n", strings.TrimSpace(msg+" "+when))
}

func (o *callFlags) connectErr(err error) error {
	if o.stdio() {
		return fmt.Errorf("cannot speak MCP with %q: %w", o.stdioCmd, err)
	}
	if isConnRefused(err) {
		return fmt.Errorf("no MCP gateway at %s: is `mcpcancel dev` running? (--mcp names another URL)", o.mcp)
	}
	return fmt.Errorf("cannot speak MCP with %s: %w", o.mcp, err)
}

// isConnRefused says whether err is a refused connection: nothing listens.
func isConnRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// callErr is a failed call as the user should read it: a JSON-RPC error
// by its message and code.
func callErr(err error) error {
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return fmt.Errorf("the server refused the call: %s (JSON-RPC error %d)", rpc.Message, rpc.Code)
	}
	return fmt.Errorf("the call failed: %w", err)
}
