//go:build groupd_faultinject

package api

import (
	"fmt"

	"github.com/groupd/groupd/internal/server"
)

// FaultPanicClientID is the client id that makes a handler panic in a
// build with the groupd_faultinject tag. Only tests build groupd that way,
// to show that a panic while handling a request closes that connection
// and nothing else; the ordinary build does not contain this code.
const FaultPanicClientID = "groupd-faultinject-panic"

func injectFault(r *server.Request) {
	if r.Header.ClientID == FaultPanicClientID {
		panic(fmt.Sprintf("fault injected into %d v%d", r.Header.Key, r.Header.Version))
	}
}
