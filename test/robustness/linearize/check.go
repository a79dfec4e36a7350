package linearize

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is the outcome of one check, with the figures a run prints.
type Report struct {
	Operations int           // operations checked (a CancelScope once per key)
	Partitions int           // call keys and tasks
	Unknown    int           // operations whose outcome was not known
	Took       time.Duration // the check's own time
	Result     porcupine.CheckResult
	// TaskOperations are the operations on tasks (their calls' own among
	// them), in Tasks partitions; TaskKinds counts them by kind, and those
	// that found the task missing as kind "/missing".
	TaskOperations, Tasks int
	TaskKinds             map[string]int
	// Abandons are the AbandonBegins, NotBegun those that found their
	// Begin had not committed (and so never would).
	Abandons, NotBegun int
	// Starts are the Starts, StartsSettled those whose Begin found its
	// call settled by a decision first, ByPlacement the decisions that
	// named their call by placement.
	Starts, StartsSettled, ByPlacement int
	// Visualisation is the path of porcupine's HTML rendering of the
	// history, written when the check failed.
	Visualisation string
}

func (r Report) String() string {
	s := fmt.Sprintf("linearizability: %s: %d operations (%d of unknown outcome) in %d partitions, checked in %v; %d task operations on %d tasks",
		r.Result, r.Operations, r.Unknown, r.Partitions, r.Took.Round(time.Millisecond), r.TaskOperations, r.Tasks)
	if len(r.TaskKinds) > 0 {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(r.TaskKinds)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, r.TaskKinds[k]))
		}
		s += " (" + strings.Join(kinds, ", ") + ")"
	}
	if r.Abandons > 0 {
		s += fmt.Sprintf("; %d abandoned Begins (%d not begun)", r.Abandons, r.NotBegun)
	}
	if r.Starts > 0 {
		s += fmt.Sprintf("; %d Starts (%d found their call settled), %d decisions by placement", r.Starts, r.StartsSettled, r.ByPlacement)
	}
	if r.Visualisation != "" {
		s += "; visualisation in " + r.Visualisation
	}
	return s
}

// Check checks history against the model. When it is not linearizable
// (or the check ran out of time) and html is not empty, it writes
// porcupine's visualisation there.
func Check(o Options, history []porcupine.Operation, timeout time.Duration, html string) (Report, error) {
	m := Model(o)
	r := Report{Operations: len(history), TaskKinds: map[string]int{}}
	for _, p := range partition(history) {
		r.Partitions++
		if !IsTaskKey(p[0].Input.(Input).Key) {
			continue
		}
		r.Tasks++
		r.TaskOperations += len(p)
		for _, op := range p {
			kind := op.Input.(Input).Op
			if missing(op.Input.(Input), op.Output.(Output)) {
				kind += "/missing"
			}
			r.TaskKinds[kind]++
		}
	}
	for _, op := range history {
		if op.Input.(Input).Op == OpAbandon {
			r.Abandons++
			if op.Output.(Output).Result == RNotBegun {
				r.NotBegun++
			}
		}
		if op.Output.(Output).Unknown {
			r.Unknown++
		}
		r.countStart(op.Input.(Input), op.Output.(Output))
	}
	began := time.Now()
	r.Result = porcupine.CheckOperationsTimeout(m, history, timeout)
	r.Took = time.Since(began)
	if r.Result == porcupine.Ok || html == "" {
		return r, nil
	}
	// Check again, keeping what the visualisation shows.
	_, info := porcupine.CheckOperationsVerbose(m, history, timeout)
	if err := porcupine.VisualizePath(m, info, html); err != nil {
		return r, fmt.Errorf("linearize: write visualisation: %w", err)
	}
	r.Visualisation = html
	return r, nil
}

// WriteHistory writes a history as JSON, for ReadHistory to replay.
func WriteHistory(h []porcupine.Operation, path string) error {
	type rec struct {
		Client    int
		Call, Ret int64
		In        Input
		Out       Output
	}
	out := make([]rec, len(h))
	for i, op := range h {
		out[i] = rec{op.ClientId, op.Call, op.Return, op.Input.(Input), op.Output.(Output)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadHistory reads what WriteHistory wrote.
func ReadHistory(path string) ([]porcupine.Operation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in []struct {
		Client    int
		Call, Ret int64
		In        Input
		Out       Output
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	h := make([]porcupine.Operation, len(in))
	for i, r := range in {
		h[i] = porcupine.Operation{ClientId: r.Client, Call: r.Call, Return: r.Ret, Input: r.In, Output: r.Out}
	}
	return h, nil
}

func (r *Report) countStart(in Input, out Output) {
	switch {
	case in.Op == OpStart:
		r.Starts++
		if out.Result == RSettled {
			r.StartsSettled++
		}
	case in.Placed:
		r.ByPlacement++
	}
}
