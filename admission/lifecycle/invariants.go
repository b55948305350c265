package lifecycle

import "fmt"

// checkStep panics when the lifecycle breaks an invariant after a Step
// that started in phase from. Step defers it only in a build with -tags
// invariants (behind the constant invariants.Enabled, so that without the
// tag neither the defer nor the call is compiled). A broken invariant is a
// programmer error: the panic names the input and the phases.
func (l *Lifecycle) checkStep(from phase, in InputKind) {
	if err := l.checkInvariants(from); err != nil {
		panic(fmt.Sprintf("lifecycle invariant broken: request %s, input %d, phase %d → %d, attempt %d: %v",
			l.req.ID, in, from, l.phase, l.attempt, err))
	}
}

// checkInvariants checks the state and the step's effects (l.out): the
// phase and the attempt agree, a waiting or dispatched request has the
// reservation its events are built from, and a request ends exactly once,
// with its outcome, in the step that ends it.
func (l *Lifecycle) checkInvariants(from phase) error {
	switch {
	case l.phase > done:
		return fmt.Errorf("unknown phase %d", l.phase)
	case (l.phase == 0) != (l.attempt == 0) && l.phase != done:
		return fmt.Errorf("phase %d with attempt %d", l.phase, l.attempt)
	case l.ti < 0 || l.ti >= len(l.order) || l.order[l.ti] < 0 || l.order[l.ti] >= len(l.req.Targets):
		return fmt.Errorf("target %d of %d eligible", l.ti, len(l.order))
	case l.phase >= reserving && l.phase < done && (l.rec == nil || l.waitOn == nil):
		return fmt.Errorf("phase %d without a reservation", l.phase)
	case l.phase == streaming && !l.streamed:
		return fmt.Errorf("streaming, not marked streamed")
	case l.degraded && !l.emergency:
		return fmt.Errorf("degraded admission outside an emergency one")
	}
	responds, outcomes := 0, 0
	for _, e := range l.out {
		switch e.Kind {
		case Respond:
			responds++
		case Telemetry:
			if e.Event != nil && e.Event.Outcome != nil {
				outcomes++
			}
		case Produce, Dispatch, Relay:
			if e.Attempt < 1 || e.Attempt > l.attempt {
				return fmt.Errorf("effect %d for attempt %d of %d", e.Kind, e.Attempt, l.attempt)
			}
		}
	}
	ended := l.phase == done && from != done
	switch {
	case responds > 1:
		return fmt.Errorf("%d responses in one step", responds)
	case responds == 1 && !ended:
		return fmt.Errorf("a response in a step that did not end the request")
	case ended != (outcomes == 1) || outcomes > 1:
		return fmt.Errorf("%d outcomes in a step that ended the request: %v", outcomes, ended)
	}
	return nil
}
