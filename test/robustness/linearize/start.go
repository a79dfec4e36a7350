package linearize

// The model of Start, a call begun beside its work (DESIGN section 4,
// coordinator/start.go). Start is a named Begin whose call id is known
// at once (its placed message), before the Begin commits; one operation
// runs from the invocation to the Begun message (or the stream's error).
// A decision by placement (Input.Placed: a CallRef with fence 0 and the
// placement) names that call before its record may exist. So, per key:
//
//   - a decision by placement on a call with a record is a decision by
//     reference;
//   - on a call with no record it creates the record, already settled by
//     it, and wins (WON, CANCELLED), when Begin's guards pass: the Begin
//     not abandoned, and the key free or its latest call settled (the
//     session is never closed here). The created call is the key's
//     latest. Else it is refused: the key's latest call runs (DUPLICATE),
//     or the Begin was abandoned (UNKNOWN_CALL: NOT_FOUND or UNKNOWN);
//     with the janitor, a completion may also find its worker replaced
//     (UNKNOWN_CALL), as the janitor finds a worker lost;
//   - Start's Begin places its call (Begun, not settled) as a named Begin
//     does, under the id its placed message gave; it reports SETTLED, and
//     changes nothing, when a decision created the call's record first;
//     it is refused ABANDONED after an abandonment, DUPLICATE while the
//     key's latest call runs, REFUSED for reasons the key does not decide
//     (no worker, the worker gone before the record was written); of
//     unknown outcome, it took effect or it did not, and its call id is
//     known only if the placed message came;
//   - a Start whose worker took no call before its record (Begin-first)
//     answers with one placed message and a fence: the model reads it as
//     a Begun, not settled.
//
// Exactly one decision per call follows: a created call is settled from
// its first moment, and the Begin that finds it places nothing.

// RSettled is a Start's Begun{settled: true}: a decision created the
// call's record before the Begin came, and the Begin wrote nothing.
const RSettled = "SETTLED"

// stepPlacedOrStart steps ks by a Start or a decision by placement.
func stepPlacedOrStart(ks keyState, in Input, out Output, o Options) []keyState {
	if in.Op == OpStart {
		return stepStart(ks, in, out)
	}
	if i := ks.calls.index(in.ID); i >= 0 {
		var next []keyState
		for _, n := range stepCall(ks.calls, in, out, o) {
			next = append(next, keyState{n, ks.abandoned})
		}
		return next
	}
	return stepCreate(ks, in, out, o)
}

// index is the index of the call named id exactly, or -1.
func (s state) index(id string) int {
	if id == "" {
		return -1
	}
	for i, c := range s {
		if c.ID == id {
			return i
		}
	}
	return -1
}

// busy says the key's latest call runs: neither a Begin nor a created
// record may take the key.
func (s state) busy() bool {
	c, ok := s.latest()
	return ok && c.State == Running
}

// stepCreate steps ks by a decision by placement on a call with no record.
func stepCreate(ks keyState, in Input, out Output, o Options) []keyState {
	abandoned := has(ks.abandoned, in.BeginID)
	creatable := !abandoned && !ks.calls.busy()
	created := keyState{ks.calls.plus(call{ID: in.ID, State: target(in.Op), Initiator: in.Initiator, Reason: in.Reason,
		BeginID: in.BeginID, Created: true}), ks.abandoned}
	win := RWon
	if in.Op == OpCancelRef {
		win = RCancelled
	}
	switch {
	case out.Unknown && creatable:
		return []keyState{ks, created}
	case out.Unknown:
		return []keyState{ks}
	case out.Result == win && creatable:
		return []keyState{created}
	case out.Result == RDuplicate && ks.calls.busy():
		return []keyState{ks}
	case missing(in, out) && (abandoned || (o.Janitor && in.Op == OpComplete && creatable)):
		return []keyState{ks}
	}
	return nil
}

// stepStart steps ks by a Start with this output.
func stepStart(ks keyState, in Input, out Output) []keyState {
	s := ks.calls
	abandoned := has(ks.abandoned, in.BeginID)
	exists := s.index(out.ID) >= 0
	placed := keyState{s.plus(call{ID: out.ID, State: Running, BeginID: in.BeginID}), ks.abandoned}
	placeable := !abandoned && !exists && !s.busy()
	switch {
	case out.Unknown && placeable:
		return []keyState{ks, placed}
	case out.Unknown, out.Result == RRefused:
		return []keyState{ks}
	case out.Result == "" && placeable && out.ID != "":
		return []keyState{placed}
	case out.Result == RSettled:
		if i := s.index(out.ID); i >= 0 && s[i].Created && s[i].State != Running {
			return []keyState{ks}
		}
	case out.Result == RAbandoned && abandoned && !exists:
		return []keyState{ks}
	case out.Result == RDuplicate && !exists && s.busy():
		return []keyState{ks}
	}
	return nil
}
