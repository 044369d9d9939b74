package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.Heartbeat, 0, 4, (*Handler).coordinate) }
