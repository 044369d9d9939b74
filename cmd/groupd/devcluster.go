package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/cluster/etcddev"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/partition"
)

// devClusterCmd runs a cluster to try on one machine: an embedded etcd
// member and --nodes groupd nodes in this process, on free loopback
// ports, with their data in a temporary directory (or --data-dir).
func devClusterCmd() *cobra.Command {
	var (
		nodes    int
		dataDir  string
		rf       int
		minISR   int
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run an embedded etcd and a cluster of groupd nodes on this machine, to try cluster mode",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 {
				return fmt.Errorf("--nodes: %d is less than 1", nodes)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			if dataDir == "" {
				d, err := os.MkdirTemp("", "groupd-dev-cluster-")
				if err != nil {
					return err
				}
				dataDir = d
			}
			etcd, err := etcddev.Start(filepath.Join(dataDir, "etcd"), etcddev.Options{})
			if err != nil {
				return err
			}
			defer etcd.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "etcd: %s\n", etcd.Endpoint())
			var (
				apps  []*app.App
				seeds []string
			)
			stopAll := func() error {
				var errs []error
				// One at a time, as a rolling stop: each hands its
				// leaderships to the nodes still up.
				for i := len(apps) - 1; i >= 0; i-- {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					errs = append(errs, apps[i].Close(ctx))
					cancel()
				}
				return errors.Join(errs...)
			}
			for i := range nodes {
				cfg := app.Config{
					Listen:                 "127.0.0.1:0",
					DataDir:                filepath.Join(dataDir, fmt.Sprintf("node-%d", i+1)),
					NodeID:                 int32(i + 1),
					AutoCreateTopics:       true,
					DefaultPartitions:      1,
					Log:                    partition.Options{Sync: partition.SyncAlways},
					Group:                  group.DefaultConfig(),
					Logger:                 log.With("node", i+1),
					HTTPListen:             "127.0.0.1:0",
					ConnectionsMaxIdle:     -1,
					FetchSessionCacheSlots: 1000,
					Cluster: app.ClusterConfig{
						EtcdEndpoints:            []string{etcd.Endpoint()},
						ClusterID:                "groupd-dev",
						DefaultReplicationFactor: min(rf, nodes),
						MinInsyncReplicas:        min(minISR, nodes),
						AutoLeaderRebalance:      true,
					},
				}
				a, err := app.Start(cfg)
				if err != nil {
					return errors.Join(fmt.Errorf("node %d: %w", i+1, err), stopAll())
				}
				apps = append(apps, a)
				seeds = append(seeds, a.Advertised())
				fmt.Fprintf(out, "node %d: %s, status page http://%s/, data in %s\n", i+1, a.Advertised(), a.HTTPAddr(), cfg.DataDir)
			}
			fmt.Fprintf(out, "bootstrap servers: %s\n", strings.Join(seeds, ","))
			fmt.Fprintln(out, "Ctrl-C stops the cluster")
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			log.Info("stopping the cluster")
			return stopAll()
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "how many groupd nodes to run")
	f.StringVar(&dataDir, "data-dir", "", "directory for etcd's and the nodes' data (default: a new temporary directory, kept after the stop)")
	f.IntVar(&rf, "default-replication-factor", 3, "replication factor of topics created without one (at most --nodes)")
	f.IntVar(&minISR, "min-insync-replicas", 2, "fewest in-sync replicas an acks=all produce needs (at most --nodes)")
	f.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	return cmd
}
