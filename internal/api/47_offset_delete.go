package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.OffsetDelete, 0, 0, (*Handler).coordinate) }
