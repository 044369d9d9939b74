package group

import "fmt"

// State is the state of a classic group.
type State uint8

// The classic group states, as in Kafka's ClassicGroupState.
const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

var stateNames = [...]string{
	Empty:               "Empty",
	PreparingRebalance:  "PreparingRebalance",
	CompletingRebalance: "CompletingRebalance",
	Stable:              "Stable",
	Dead:                "Dead",
}

// String returns the state name Kafka uses on the wire (DescribeGroups,
// ListGroups).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// validPrevious lists, for each target state, the states it may be entered
// from. It is Kafka's table; anything else is a bug in this package.
var validPrevious = [...][]State{
	Empty:               {PreparingRebalance},
	PreparingRebalance:  {Stable, CompletingRebalance, Empty},
	CompletingRebalance: {PreparingRebalance},
	Stable:              {CompletingRebalance},
	Dead:                {Stable, PreparingRebalance, CompletingRebalance, Empty, Dead},
}

// CanTransition reports whether Kafka allows moving from one state to another.
func CanTransition(from, to State) bool {
	if int(to) >= len(validPrevious) {
		return false
	}
	for _, s := range validPrevious[to] {
		if s == from {
			return true
		}
	}
	return false
}

// mustTransition panics on an illegal transition: reaching one means the
// machine's own bookkeeping is wrong, and continuing would corrupt the group.
func mustTransition(from, to State) {
	if !CanTransition(from, to) {
		panic(fmt.Sprintf("group: illegal state transition %s -> %s", from, to))
	}
}
