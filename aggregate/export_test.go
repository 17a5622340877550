package aggregate

import "time"

// DecideAfterRecovery decides c on s right after the takeover r alone
// (r.Then ignored): on the recovered state, before any follow-on of the
// recovery, knowing what the recovery found lost (a model call). It
// returns c's refusal there, or the takeover's own refusal.
func DecideAfterRecovery(s State, r Recover, c Command, now time.Time) error {
	d := &decider{s: s.Clone(), now: now}
	r.Then = nil
	if err := d.recover(r); err != nil {
		return err
	}
	if c == nil {
		return nil
	}
	return d.command(c)
}
