// Package a cites the rules (docs/semantics.md §8), a section that is
// missing (docs/semantics.md §9), a quote the section holds
// (docs/semantics.md §8 "only a runner that is gone is
// recovered from"), one it does not (docs/semantics.md §1, "rule two"),
// a titled rule (docs/semantics.md §8, "A run can always be answered"),
// the design notes (SEMANTICS §8), a tracker entry (issue
// 17), a review finding (reviewer F4), the scenarios 2 and 3
// (docs/semantics.md §12 scenario 2; docs/semantics.md §12, scenario 3)
// and a list (docs/semantics.md §1, §8 and §11); nats.go's issue 42 is
// allowed. TestSemantics9_Missing, TestScenario2_Listed and
// TestScenario03_Unlisted are named after rules.
package a
