// Command kfakeserver runs franz-go's kfake, an in-memory one-broker Kafka
// cluster, in a process of its own, so that a benchmark can measure its
// resident memory apart from the load generator's. It prints
// "kfake listening on HOST:PORT" once it accepts connections and runs until
// it is sent SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	topic := flag.String("topic", "", "topic to create at start (none if empty)")
	partitions := flag.Int("partitions", 1, "partitions of -topic")
	flag.Parse()

	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if *topic != "" {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), *topic))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeserver:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Printf("kfake listening on %s\n", c.ListenAddrs()[0])
	<-sig
	c.Close()
}
