package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ConsumerGroupDescribe describes consumer groups; v1 adds each member's
// MemberType.
func init() { register(kmsg.ConsumerGroupDescribe, 0, 1, (*Handler).coordinate) }
