package linearize

// The model of AbandonBegin, a gateway's settling of a Begin whose reply
// it lost (coordinator/begin.go). A Begin may be named (Input.BeginID);
// AbandonBegin of that name marks it abandoned and reads the key's index
// in one transaction, then fails the call the index holds if the named
// Begin placed it. So, per key:
//
//   - a Begin abandoned places no call from then on: it is refused
//     (ABANDONED, or a refusal decided before its transaction), and one
//     of unknown outcome takes no effect;
//   - only an abandoned Begin is refused ABANDONED;
//   - AbandonBegin answers NOT_BEGUN when the key's latest call is not the
//     Begin's (none, another's, or, with retention, one whose index entry
//     may have expired once it settled); otherwise it names the call and
//     settles it as the owner's Fail does: WON on a running call (or the
//     same failure made before, its own earlier attempt), else what won.
//     Its read and its failure are two transactions; checked as one at the
//     failure, the call it read is still under the key (it may no longer
//     be the latest), and the abandonment stands since the read.
//   - With retention, the call it found may have settled and its record
//     expired (its index entry outlives it): NOT_FOUND, and the call is
//     gone from then on.
//   - Refused (INVALID_ARGUMENT), it changed nothing; of unknown outcome,
//     it took effect or it did not.

// keyState is a key's calls and the Begins abandoned under it.
type keyState struct {
	calls     state
	abandoned string // begin ids (a set, see keySet)
}

// stepAbandoning steps ks by an AbandonBegin, by a named Begin, or by a
// Begin answered ABANDONED.
func stepAbandoning(ks keyState, in Input, out Output, o Options) []keyState {
	if in.Op == OpAbandon {
		return stepAbandon(ks, in, out, o)
	}
	abandoned := in.BeginID != "" && has(ks.abandoned, in.BeginID)
	switch {
	case out.Result == RAbandoned:
		if abandoned {
			return []keyState{ks}
		}
		return nil
	case abandoned && out.Unknown:
		return []keyState{ks}
	case abandoned && out.Result == "":
		return nil // an abandoned Begin placed a call
	}
	var next []keyState
	for _, n := range stepCall(ks.calls, in, out, o) {
		next = append(next, keyState{n, ks.abandoned})
	}
	return next
}

// stepAbandon steps ks by an AbandonBegin with this output.
func stepAbandon(ks keyState, in Input, out Output, o Options) []keyState {
	marked := keySet(append(members(ks.abandoned), in.BeginID))
	s := ks.calls
	if out.Unknown {
		next := []keyState{ks, {s, marked}}
		if c, ok := s.latest(); ok && c.BeginID == in.BeginID && c.State == Running {
			next = append(next, keyState{s.with(len(s)-1, decided(c, Failed, in.Initiator, in.Reason)), marked})
		}
		return next
	}
	switch out.Result {
	case RRefused:
		return []keyState{ks}
	case RNotBegun:
		c, ok := s.latest()
		if ok && c.BeginID == in.BeginID && (c.State == Running || !o.Retention) {
			return nil // the index held the Begin's call
		}
		return []keyState{{s, marked}}
	}
	i := len(s) - 1
	for i >= 0 && (s[i].BeginID != in.BeginID || in.BeginID == "") {
		i--
	}
	if out.Result == RNotFound {
		if i < 0 || !o.Retention || s[i].State == Running {
			return nil
		}
		c := s[i]
		c.Gone = true
		return []keyState{{s.with(i, c), marked}}
	}
	if i < 0 || (s[i].ID != "" && s[i].ID != out.ID) || out.ID == "" {
		return nil // no call of this Begin, or another
	}
	c := s[i]
	c.ID = out.ID
	fail := Input{Op: OpFail, Key: in.Key, ID: out.ID, Initiator: in.Initiator, Reason: in.Reason}
	n, ok := decide(s.with(i, c), i, c, "settle", fail, out)
	if !ok {
		return nil
	}
	return []keyState{{n, marked}}
}
