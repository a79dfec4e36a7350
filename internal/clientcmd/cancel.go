package clientcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutCancel = `Cancels a running call as an operator:

  mcpcancel cancel [flags] CALL

CALL is the call's id or its start (the short id 'audit list' and the
console print); it must name exactly one running call. The decision is
audited with initiator operator and, in the reason, the operator's identity:
the name on the --tls-cert certificate (its role must be operator), and
--as. The call's client is answered with an error.

Exit status: 0 cancelled; 1 the call had already ended, or no single
running call matched; 2 usage error.`

type cancelFlags struct {
	coordinator, reason, as string
	tls                     tlsconfig.Files // an operator certificate
	call                    string
}

func RunCancel(ctx context.Context, s cmdline.Streams, args []string) error {
	o := &cancelFlags{}
	f := cmdline.NewFlags(s, "cancel", aboutCancel)
	f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.StringVar(&o.reason, "reason", "", "why, for the audit")
	f.StringVar(&o.as, "as", currentUser(), "the `person` cancelling, recorded beside the certificate's name")
	f.TLS(&o.tls)
	pos, err := f.ParseInterspersed(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || !isCallIDPrefix(pos[0]) || pos[0] == "" {
		return cmdline.Usage(errors.New("want one CALL: a call id, or its start, in hex"))
	}
	o.call = strings.ToLower(pos[0])
	conn, err := dialCoordinator(o.coordinator, o.tls)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	admin := pb.NewAdminServiceClient(conn)
	id := o.call
	if len(id) < callIDLen { // a short id: find the running call it names
		if id, err = resolveRunning(ctx, admin, o.call); err != nil {
			return coordinatorErr(o.coordinator, err)
		}
	}
	resp, err := admin.OperatorCancel(ctx, &pb.OperatorCancelRequest{CallId: id, Reason: o.reason, OnBehalfOf: o.as})
	if err != nil {
		return coordinatorErr(o.coordinator, err)
	}
	if resp.GetResult() != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		return fmt.Errorf("call %s had already ended: %s", id, ended(resp))
	}
	fmt.Fprintf(s.Stdout, "cancelled %s: %s\n", id, resp.GetReason())
	return nil
}

// resolveRunning finds the one running call whose id starts with prefix.
func resolveRunning(ctx context.Context, admin pb.AdminServiceClient, prefix string) (string, error) {
	resp, err := admin.ListCalls(ctx, &pb.ListCallsRequest{CallIdPrefix: prefix})
	if err != nil {
		return "", err
	}
	switch calls := resp.GetCalls(); len(calls) {
	case 0:
		return "", fmt.Errorf("no running call's id starts with %s (see 'mcpcancel audit list --call %s' for ended ones)", prefix, prefix)
	case 1:
		return calls[0].GetCall().GetCallId(), nil
	default:
		var ids []string
		for _, c := range calls {
			ids = append(ids, c.GetCall().GetCallId())
		}
		return "", fmt.Errorf("%d running calls start with %s; give more of the id: %s", len(calls), prefix, strings.Join(ids, ", "))
	}
}

// ended says how a call that an operator could not cancel had ended.
func ended(r *pb.OperatorCancelResponse) string {
	what := map[pb.CancelResult]string{
		pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED: "it completed",
		pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED:    "it failed",
		pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED: "it was cancelled",
	}[r.GetResult()]
	if what == "" {
		what = r.GetResult().String()
	}
	if who := client.InitiatorName(r.GetWinnerInitiator()); who != "" {
		what += " (" + who
		if r.GetWinnerReason() != "" {
			what += ": " + r.GetWinnerReason()
		}
		what += ")"
	}
	return what
}

// currentUser names the person at the keyboard, for the audit.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
