package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.ListGroups, 0, 5, (*Handler).coordinate) }
