//go:build !groupd_faultinject

package api

import "github.com/groupd/groupd/internal/server"

// injectFault does nothing outside the fault-injection build (fault_on.go).
func injectFault(*server.Request) {}
