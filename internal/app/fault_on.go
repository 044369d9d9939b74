//go:build groupd_faultinject

package app

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
)

// FaultPanicGroupPrefix names the groups whose requests make the group
// machine's step panic in a build with the groupd_faultinject tag. Only
// tests build groupd that way, to show that such a panic is contained
// (the shard fails what it held and is rebuilt from the store); the
// ordinary build does not contain this code.
const FaultPanicGroupPrefix = "groupd-faultinject-panic"

func faultHooks() coordinator.Hooks {
	return coordinator.Hooks{Stepping: func(_ int, _ *group.Machine, ev group.Event) {
		r, ok := ev.(group.Request)
		if !ok {
			return
		}
		if id := requestGroup(r); strings.HasPrefix(id, FaultPanicGroupPrefix) {
			panic("fault injected into the step of a request for group " + id)
		}
	}}
}

// requestGroup is the group an offset commit or a join names.
func requestGroup(r group.Request) string {
	switch m := r.Msg.(type) {
	case *kmsg.OffsetCommitRequest:
		return m.Group
	case *kmsg.JoinGroupRequest:
		return m.Group
	}
	return ""
}
