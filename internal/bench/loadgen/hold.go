package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// runHold forms o.groups groups of o.size members, each on its own
// connection, and has every member heartbeat every o.period, their phases
// spread evenly over the period, for o.hold after the first round. It
// reports the server's resident memory once every member has heartbeated
// once and at the end, what each member added to it, the share of a core
// the server used, and the heartbeats' latencies after the first round.
func runHold(o *options) error {
	n := o.groups * o.size
	idle := processRSS(o.serverPID)
	conns, err := dialN(o.target, n)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	armAll(conns, ioTimeout)
	members, err := formGroups(o.target, conns, "hold", o.groups, o.size)
	if err != nil {
		return err
	}
	beats := make([]prepared, n)
	for i, m := range members {
		beats[i] = prepare(heartbeatRequest(m))
	}
	runtime.GC()
	start := time.Now()
	formed := start.Add(o.period)
	end := formed.Add(o.hold)
	lat := make([][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			first := start.Add(o.period * time.Duration(i) / time.Duration(n))
			for next := first; next.Before(end); next = next.Add(o.period) {
				time.Sleep(time.Until(next))
				c.arm(ioTimeout)
				t := time.Now()
				if err := beat(c, beats[i]); err != nil {
					errs[i] = err
					return
				}
				if next != first {
					lat[i] = append(lat[i], time.Since(t))
				}
			}
		})
	}
	time.Sleep(time.Until(formed.Add(o.period / 30)))
	rssFormed := processRSS(o.serverPID)
	m := meter{pid: o.serverPID}
	m.start()
	time.Sleep(time.Until(end))
	m.stop()
	rssEnd := processRSS(o.serverPID)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	all := latencies(lat)
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	p50, p99 := millis(percentile(all, 50)), millis(percentile(all, 99))
	cpu := 100 * m.serverCPU.Seconds() / m.elapsed.Seconds()
	extra := map[string]float64{"idle_mib": mib(idle), "formed_mib": mib(rssFormed), "end_mib": mib(rssEnd), "cpu_pct": cpu}
	for _, r := range []result{
		{Metric: fmt.Sprintf("RSS of %d members, formed", n), Value: mib(rssFormed), Unit: "MiB"},
		{Metric: fmt.Sprintf("RSS of %d members, after the hold", n), Value: mib(rssEnd), Unit: "MiB"},
		{Metric: "RSS per member", Value: float64(rssEnd-idle) / 1024 / float64(n), Unit: "KiB"},
		{Metric: "heartbeat p99", Value: p99, Unit: "ms", P50ms: p50, P99ms: p99},
		{Metric: "server CPU", Value: cpu, Unit: "% of a core"},
	} {
		r.Scenario, r.Ops, r.Seconds, r.Extra = o.scenario, int64(len(all)), m.elapsed.Seconds(), extra
		r.print()
	}
	return nil
}
