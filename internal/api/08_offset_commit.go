package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.OffsetCommit, 0, 9, (*Handler).coordinate) }
