// Package lab is the rebalance lab: it runs a live workload (a producer at a
// set rate and a group of franz-go consumers, each member its own client)
// against the embedded groupd or any Kafka cluster, disturbs the group the
// way deployments and failures do (scenarios), under each rebalance protocol,
// and measures what every rebalance cost from the clients' own view: which
// member owned which partition when (from the assignment callbacks) and which
// records each member consumed (by partition, offset and key).
//
// The measurements are exact over that recording, not estimated: a partition
// is paused from the moment no member owns it until one does again, a record
// is consumed twice when its offset is polled a second time, and a record is
// lost when it was acknowledged to the producer and never consumed by the
// end, which fails the run. Analyze is a pure function of a Recording, so the
// measurement code is tested on recorded streams with known answers.
//
// The layers: Recording and Analyze (measure.go) know nothing of Kafka;
// member.go and workload.go turn franz-go callbacks and records into a
// Recording; scenario.go and run.go drive the group; report.go prints the
// table, the JSON and the self-contained HTML page with charts drawn by
// gonum.org/v1/plot.
package lab
