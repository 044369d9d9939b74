package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one measurement, printed as a line "RESULT {json}" for the
// harness to collect.
type result struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"` // what Value is, e.g. "hb/s"
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// HigherIsBetter tells the harness which way the ratio reads.
	HigherIsBetter bool `json:"higher_is_better"`

	Ops     int64   `json:"ops,omitempty"`     // operations in the measured windows
	Seconds float64 `json:"seconds,omitempty"` // length of the measured windows
	P50ms   float64 `json:"p50_ms,omitempty"`
	P99ms   float64 `json:"p99_ms,omitempty"`

	// The server's CPU time (user and system, from /proc/PID/stat) in the
	// measured windows per operation, its resident memory at the end of
	// the last one, and the load generator's own CPU time per operation.
	ServerCPUusPerOp  float64 `json:"server_cpu_us_per_op,omitempty"`
	ServerRSSMiB      float64 `json:"server_rss_mib,omitempty"`
	LoadgenCPUusPerOp float64 `json:"loadgen_cpu_us_per_op,omitempty"`

	Extra map[string]float64 `json:"extra,omitempty"`
}

func (r result) print() {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	fmt.Printf("RESULT %s\n", b)
}

// meter measures windows: their length, the server's and this process's
// CPU time in them.
type meter struct {
	pid       int // the server's; 0 if unknown
	elapsed   time.Duration
	serverCPU time.Duration
	selfCPU   time.Duration

	begin             time.Time
	serverCPU0, self0 time.Duration
}

func (m *meter) start() {
	m.serverCPU0 = processCPU(m.pid)
	m.self0 = selfCPU()
	m.begin = time.Now()
}

func (m *meter) stop() {
	m.elapsed += time.Since(m.begin)
	m.serverCPU += processCPU(m.pid) - m.serverCPU0
	m.selfCPU += selfCPU() - m.self0
}

// add records a window measured elsewhere (d long) with the CPU times
// since start.
func (m *meter) add(d time.Duration) {
	m.elapsed += d
	m.serverCPU += processCPU(m.pid) - m.serverCPU0
	m.selfCPU += selfCPU() - m.self0
}

// fill sets the result's CPU and memory fields for ops operations.
func (m *meter) fill(r *result, ops int64) {
	r.Ops, r.Seconds = ops, m.elapsed.Seconds()
	if ops > 0 {
		if m.pid != 0 {
			r.ServerCPUusPerOp = float64(m.serverCPU.Microseconds()) / float64(ops)
		}
		r.LoadgenCPUusPerOp = float64(m.selfCPU.Microseconds()) / float64(ops)
	}
	if m.pid != 0 {
		r.ServerRSSMiB = float64(processRSS(m.pid)) / (1 << 20)
	}
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on
// Linux's usual builds).
const clockTick = 10 * time.Millisecond

// processCPU is the user and system time process pid has used, or 0 if
// pid is 0 or unreadable.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// After the command name, which is in parentheses and may hold
	// spaces: state is the first field, utime and stime the 12th and 13th.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// processRSS is process pid's resident memory in bytes (VmRSS), or 0.
func processRSS(pid int) int64 {
	if pid == 0 {
		return 0
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// selfCPU is the user and system time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the q-th percentile (0 <= q <= 100) of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)) * q / 100)
	return sorted[min(i, len(sorted)-1)]
}

// latencies merges per-member latencies and sorts them.
func latencies(per [][]time.Duration) []time.Duration {
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of values (sorted in place).
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}
