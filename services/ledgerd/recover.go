package ledgerd

import (
	"context"
	"fmt"
	"time"
)

// noteErr classifies err from the session operation op, records it in
// the member's health, and remembers the first fatal one: the poll loop
// then recreates the session (recreate) before it does anything else.
func (s *Service) noteErr(op string, err error) errClass {
	c := classify(err)
	s.health.failed(fmt.Errorf("%s: %w", op, err))
	if c == errFatal && s.fatal == nil {
		s.fatal = fmt.Errorf("%s: %w", op, err)
		s.m.fatalErrors.Inc()
	}
	return c
}

// endedUncommitted counts a transaction that ended without committing (an
// abort, a failed Begin, an unknown outcome). Config.AbortsMax of them in
// a row make the session unusable: whatever keeps failing it, a new
// session, or a new process, is the remedy left.
func (s *Service) endedUncommitted(err error) {
	s.abortsInRow++
	s.uncommitted = true
	if s.abortsInRow >= s.cfg.AbortsMax && s.fatal == nil {
		s.fatal = fmt.Errorf("%d transactions in a row ended without committing, the last: %w", s.abortsInRow, err)
		s.m.fatalErrors.Inc()
	}
}

// recreate replaces a session that a fatal error made unusable: it leaves
// the group with the old session (so that the partitions go elsewhere at
// once rather than after the session timeout), forgets every partition's
// state, and opens a new session, which rejoins the group and rebuilds
// whatever it is assigned from its snapshot and the committed log, as at
// start. The new session's InitProducerID also fences the old one, if it
// is still alive somewhere. It tries Config.RecreateAttempts times, each
// time until the brokers answer a request of the new client; when every
// try fails it returns ErrSessionUnusable, with no session open, and the
// member must exit: it must never hold partitions it cannot serve. So it
// does as well when Config.RecreateAttempts sessions in a row have become
// unusable before any of them committed.
func (s *Service) recreate(ctx context.Context) error {
	cause := s.fatal
	s.health.setFatal(cause)
	s.log.Error("ledger session unusable; leaving the group and recreating the session", "err", cause)
	s.closeSession()
	s.resetState()
	if s.recreatesInRow >= s.cfg.RecreateAttempts {
		// Every session since the last commit failed the same way (an
		// authorization the broker keeps refusing): another would too.
		err := fmt.Errorf("%w: %w; %d sessions in a row failed before committing anything", ErrSessionUnusable, cause, s.recreatesInRow+1)
		s.health.setFatal(err)
		return err
	}
	s.recreatesInRow++
	backoff := 500 * time.Millisecond
	var err error
	for attempt := 1; attempt <= s.cfg.RecreateAttempts; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		if err = s.openSession(); err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = s.tx.Ping(pctx)
			cancel()
			if err == nil {
				err = s.initProducer(ctx)
			}
			if err == nil {
				s.m.recreates.Inc()
				// The old session's outputs are gone: until a rebuild or
				// a commit, the member has work it cannot show (Health).
				s.fatal, s.abortsInRow, s.uncommitted = nil, 0, true
				s.health.setFatal(nil)
				s.log.Info("ledger session recreated; rejoining the group", "attempt", attempt)
				return nil
			}
			s.closeSession()
		}
		s.log.Warn("recreating the ledger session failed", "attempt", attempt, "of", s.cfg.RecreateAttempts, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	err = fmt.Errorf("%w: %w; recreating it failed %d times, the last: %w", ErrSessionUnusable, cause, s.cfg.RecreateAttempts, err)
	s.health.setFatal(err)
	return err
}

// closeSession closes the session (leaving the group) and forgets it. A
// Close that does not return within the session timeout (a broker that
// accepts connections and never answers) is left behind: the group drops
// the member after that timeout anyway, and the next session's callbacks
// are of a new generation.
func (s *Service) closeSession() {
	sess := s.tx
	if sess == nil {
		return
	}
	s.tx = nil
	s.sessClient.Store(nil)
	s.mu.Lock()
	s.gen++ // the old session's revoke during Close drops nothing of ours
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sess.Close()
	}()
	select {
	case <-done:
	case <-s.clock.After(s.cfg.SessionTimeout):
		s.log.Warn("closing the unusable ledger session did not finish; leaving it behind", "waited", s.cfg.SessionTimeout)
	}
}

// resetState forgets everything tied to the old session: partition state
// (rebuilt on assignment), rebuilds in flight (their results no longer
// match a token), drops and revokes seen, and the open transaction.
func (s *Service) resetState() {
	s.parts = map[int32]*partState{}
	clear(s.catching)
	s.mu.Lock()
	clear(s.dropped)
	s.revokeSeen = false
	s.mu.Unlock()
	s.inTxn, s.txnDropped, s.txnLease = false, false, false
	s.perrMu.Lock()
	s.produceErr = nil
	s.perrMu.Unlock()
}

// initProducer has the new session's producer id made now (Begin loads
// it) rather than at the first decision. Its InitProducerID fences the old
// session's producer and makes the broker abort the transaction that one
// left open, which otherwise holds back the read_committed reads of the
// rebuild until the transaction timeout: on kfake, 5 s of the 8 s it took
// to decide again after a fenced EndTxn.
func (s *Service) initProducer(ctx context.Context) error {
	if err := s.tx.Begin(); err != nil {
		return fmt.Errorf("begin a transaction: %w", err)
	}
	if _, err := s.tx.End(ctx, false, nil); err != nil {
		return fmt.Errorf("end the empty transaction: %w", err)
	}
	return nil
}
