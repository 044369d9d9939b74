package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.DeleteGroups, 0, 2, (*Handler).coordinate) }
