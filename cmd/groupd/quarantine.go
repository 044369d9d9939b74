package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/groupd/groupd/internal/partition"
)

// quarantineCmd reads what a start set aside in the quarantine.
func quarantineCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quarantine",
		Short: "Read partition data a start set aside in the quarantine",
		Args:  cobra.NoArgs,
	}
	var file string
	dump := &cobra.Command{
		Use:   "dump --file FILE",
		Short: "Print the records of the intact batches of a quarantined segment or segment tail",
		Long: `dump prints, one line per record, the offset, the key and the value of every
record in the intact batches of a file in the data directory's quarantine/:
a segment moved there whole, or the tail of one copied there from its first
damaged batch (<segment>.log.tail-at-byte-<pos>-offset-<offset>). Keys and
values are Go-quoted strings (or null). The damaged bytes are skipped; a
batch whose records do not decode is named at the end, and the command
then exits with an error. The file is only read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := partition.DumpQuarantinedTail(cmd.OutOrStdout(), file)
			fmt.Fprintf(cmd.ErrOrStderr(), "%d records\n", n)
			return err
		},
	}
	dump.Flags().StringVar(&file, "file", "", "the quarantined file to read")
	dump.MarkFlagRequired("file")
	cmd.AddCommand(dump)
	return cmd
}
