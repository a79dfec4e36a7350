package linearize

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// partition splits a history by call key, the model's partitions.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(Input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describeOperation(in, out interface{}) string {
	i, o := in.(Input), out.(Output)
	var b strings.Builder
	b.WriteString(i.Op)
	if i.ID != "" {
		fmt.Fprintf(&b, "(%s)", short(i.ID))
	}
	if i.Principal != "" {
		fmt.Fprintf(&b, " as %s", i.Principal)
	}
	if i.Initiator != "" {
		fmt.Fprintf(&b, " by %s", i.Initiator)
	}
	if i.Placed {
		b.WriteString(" by placement")
	}
	if i.BeginID != "" {
		fmt.Fprintf(&b, " begin %s", short(i.BeginID))
	}
	if i.Withdraw != "" {
		fmt.Fprintf(&b, " withdraw [%s]", i.Withdraw)
	}
	if i.Keys != "" {
		fmt.Fprintf(&b, " [%s]", i.Keys)
	}
	switch {
	case o.Unknown:
		b.WriteString(" -> ?")
	default:
		b.WriteString(strings.TrimRight(" -> "+strings.TrimSpace(o.Result+" "+o.State), " "))
		if o.Initiator != "" {
			fmt.Fprintf(&b, " by %s", o.Initiator)
		}
		if o.Inputs != "" {
			fmt.Fprintf(&b, " waiting [%s]", o.Inputs)
		}
		if o.Accepted != "" {
			fmt.Fprintf(&b, " took [%s]", o.Accepted)
		}
		if o.ID != "" && i.ID == "" {
			fmt.Fprintf(&b, " %s", short(o.ID))
		}
	}
	return b.String()
}

func describeState(st interface{}) string {
	ks := st.(keyState)
	s := ks.calls
	if len(s) == 0 {
		if ks.abandoned != "" {
			return "no call; abandoned [" + ks.abandoned + "]"
		}
		return "no call"
	}
	var parts []string
	for _, c := range s {
		d := short(c.ID) + " " + c.State
		if c.Task {
			d = short(c.ID) + " task of " + c.Principal + " " + taskStatus(c)
		}
		if c.Initiator != "" {
			d += " by " + c.Initiator
		}
		if c.Retry {
			d += " (retry)"
		}
		if c.Created {
			d += " (created by its decision)"
		}
		if c.Inputs != "" {
			d += " waiting [" + c.Inputs + "]"
		}
		if c.Used != "" {
			d += " used [" + c.Used + "]"
		}
		if c.TaskGone {
			d += " (expired)"
		}
		parts = append(parts, d)
	}
	if ks.abandoned != "" {
		parts = append(parts, "abandoned ["+ks.abandoned+"]")
	}
	return strings.Join(parts, "; ")
}

func short(id string) string {
	if id == "" {
		return "?"
	}
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
