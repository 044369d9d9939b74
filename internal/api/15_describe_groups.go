package api

import "github.com/twmb/franz-go/pkg/kmsg"

func init() { register(kmsg.DescribeGroups, 0, 6, (*Handler).coordinate) }
