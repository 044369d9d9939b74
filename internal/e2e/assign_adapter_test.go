package e2e

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/assign"
)

// TestGroupAdapterBalancers runs the group scenario of TestGroupClients
// with franz-go clients that assign with groupd's own assignors through
// assign.Balancer: cooperative-sticky must hand partitions over in two
// rounds with no partition owned twice, and the eager ones must revoke
// everything before reassigning.
func TestGroupAdapterBalancers(t *testing.T) {
	for _, b := range []struct {
		name string
		a    assign.Assignor
		coop bool
	}{
		{"range", assign.Range(), false},
		{"roundrobin", assign.RoundRobin(), false},
		{"sticky", assign.Sticky(), false},
		{"cooperative-sticky", assign.CooperativeSticky(), true},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runGroupScenario(t, groupClient{"kgo+assign/" + b.name, b.coop, func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
				return startKgoMember(t, addr, topic, group, m, tr, kgo.Balancers(assign.Balancer(b.a)))
			}})
		})
	}
}
