//go:build cgo

package e2e

import "testing"

func init() {
	startConfluentClassicMember = func(t *testing.T, addr, topic, group, member string, tr *ownershipTracker) groupMember {
		return startConfluentChild(t, confluentMemberConfig{Addr: addr, Topic: topic, Group: group, Member: member, Classic: true}, tr)
	}
}
