package assign_test

import (
	"fmt"

	"github.com/groupd/groupd/assign"
)

// A Target follows a consumer group from epoch to epoch: tell it what
// changed, call Assign, and record the targets of the members it returns.
func ExampleTarget() {
	orders := []string{"orders"}
	target, err := assign.NewTarget(assign.Uniform(), []assign.Member{
		{ID: "a", Topics: orders},
		{ID: "b", Topics: orders},
	}, map[string]int32{"orders": 6})
	if err != nil {
		panic(err)
	}
	fmt.Println("changed:", target.Assign())

	// Epoch 2: a third member joins; a and b each give up one partition.
	target.SetMember("c", "", orders)
	fmt.Println("changed:", target.Assign())

	// Epoch 3: the topic gains two partitions; the new ones are dealt
	// without moving any other.
	target.SetTopic("orders", 8)
	fmt.Println("changed:", target.Assign())
	for _, id := range []string{"a", "b", "c"} {
		tps, _ := target.Member(id)
		fmt.Println(id, tps)
	}
	// Output:
	// changed: [a b]
	// changed: [a b c]
	// changed: [a b]
	// a [{orders [0 1 6]}]
	// b [{orders [3 4 7]}]
	// c [{orders [2 5]}]
}
