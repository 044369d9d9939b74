package consumer

import "github.com/twmb/franz-go/pkg/kmsg"

// joinRequest is a v1 join (epoch 0) subscribing to topics by name.
func joinRequest(member string, topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = "g"
	req.MemberID = member
	req.RebalanceTimeoutMillis = 60000
	req.SubscribedTopicNames = topics
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return req
}

// heartbeatRequest is a v1 heartbeat reporting owned (nil: not reported).
func heartbeatRequest(member string, epoch int32, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = "g"
	req.MemberID = member
	req.MemberEpoch = epoch
	req.Topics = owned
	return req
}
