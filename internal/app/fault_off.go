//go:build !groupd_faultinject

package app

import "github.com/groupd/groupd/internal/coordinator"

// faultHooks adds nothing outside the fault-injection build (fault_on.go).
func faultHooks() coordinator.Hooks { return coordinator.Hooks{} }
