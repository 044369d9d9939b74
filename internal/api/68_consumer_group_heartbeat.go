package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ConsumerGroupHeartbeat is the whole KIP-848 protocol for a member: join,
// heartbeat, reconcile and leave. v1 (KIP-1082) adds SubscribedTopicRegex
// and has the client generate its member id.
func init() { register(kmsg.ConsumerGroupHeartbeat, 0, 1, (*Handler).coordinate) }
