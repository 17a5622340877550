package client

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// ItemFilter selects pending inbox items: by tool, requirement (NAME or
// NAME@vN), how long they have waited, the "amount" their arguments carry
// (ArgumentsAmount) and named RUN/ACTION items. One filter for `weft
// decide`'s flags and the console's inbox and batch parameters, so that
// both select the same.
type ItemFilter struct {
	tool, reqName, reqVersion string
	olderThan                 time.Duration
	lo, hi                    float64
	hasLo, hasHi              bool
	items                     [][2]string
}

// ParseItemFilter makes a filter; "" (0 for olderThan, none for items)
// selects everything on that count. A value that does not parse is
// bad_filter with the parameter as reason: older_than (negative),
// min_amount, max_amount (not a number), item (not RUN/ACTION).
func ParseItemFilter(tool, requirement string, olderThan time.Duration, minAmount, maxAmount string, items []string) (ItemFilter, *weft.Error) {
	bad := func(param, msg string) (ItemFilter, *weft.Error) {
		return ItemFilter{}, &weft.Error{Code: weft.CodeBadFilter, Reason: param, Message: msg}
	}
	f := ItemFilter{tool: tool, olderThan: olderThan}
	f.reqName, f.reqVersion, _ = strings.Cut(requirement, "@v")
	if olderThan < 0 {
		return bad("older_than", "older than: want a duration such as 30m or 72h")
	}
	var err error
	if minAmount != "" {
		if f.lo, err = strconv.ParseFloat(minAmount, 64); err != nil {
			return bad("min_amount", "minimum amount: want a number")
		}
		f.hasLo = true
	}
	if maxAmount != "" {
		if f.hi, err = strconv.ParseFloat(maxAmount, 64); err != nil {
			return bad("max_amount", "maximum amount: want a number")
		}
		f.hasHi = true
	}
	for _, it := range items {
		// A run id has no "/"; the action id does (turn/call).
		run, action, ok := strings.Cut(it, "/")
		if !ok || run == "" || action == "" {
			return bad("item", "item: want RUN/ACTION, such as pay-7/2/call_2_1")
		}
		f.items = append(f.items, [2]string{run, action})
	}
	return f, nil
}

// Match reports whether an item passes the filter: its run and action,
// tool, requirement (nil for an item that is no approval request: a
// requirement filter leaves it out), the time it was asked and its
// arguments, at now. An amount bound keeps only items whose arguments
// carry an amount within it.
func (f ItemFilter) Match(run, action, tool string, req *events.Requirement, since time.Time, args json.RawMessage, now time.Time) bool {
	switch {
	case f.tool != "" && tool != f.tool:
		return false
	case f.reqName != "" && (req == nil || req.Name != f.reqName || f.reqVersion != "" && strconv.Itoa(req.Version) != f.reqVersion):
		return false
	case f.olderThan > 0 && now.Sub(since) < f.olderThan:
		return false
	}
	if f.hasLo || f.hasHi {
		n, ok := ArgumentsAmount(args)
		if !ok || f.hasLo && n < f.lo || f.hasHi && n > f.hi {
			return false
		}
	}
	if len(f.items) > 0 {
		for _, ra := range f.items {
			if ra[0] == run && ra[1] == action {
				return true
			}
		}
		return false
	}
	return true
}
