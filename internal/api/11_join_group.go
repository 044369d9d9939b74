package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.JoinGroup, 0, 9, (*Handler).coordinate) }
