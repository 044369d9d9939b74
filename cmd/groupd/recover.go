package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/groupd/groupd/internal/broker"
)

func recoverCmd() *cobra.Command {
	var opts broker.RecoverOptions
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Rebuild a lost or unreadable meta.json from the partition directories",
		Long: `recover rebuilds the broker metadata (meta.json) of a data directory from the
topic directories under logs/: each topic's name, id, partition count and
configs come from its descriptor (logs/<id>/topic.json), the cluster id
from the descriptors, and the producer-id limit from the highest producer
id in the logs plus a margin, so producer ids are never handed out twice.
The partition logs are read, never changed. It prints what it found and
writes nothing if a directory cannot be accounted for. Run it with groupd
stopped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			if err := broker.Recover(opts); err != nil {
				return fmt.Errorf("recover %s: %w", opts.DataDir, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data-dir", "./groupd-data", "the data directory to repair")
	f.BoolVar(&opts.Force, "force", false, "rebuild meta.json even if it is present and readable (the old one is kept as meta.json.bak-<time>)")
	f.BoolVar(&opts.AdoptUnknown, "adopt-unknown", false, `adopt topic directories without a usable descriptor as topics named "recovered-<id>"`)
	f.StringVar(&opts.ClusterID, "cluster-id", "", "cluster id to write (default: the old meta.json's if readable, else the one the descriptors name)")
	return cmd
}
