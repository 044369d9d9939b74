package main

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const errTopicAlreadyExists = 36

// ensureTopic creates topic with partitions partitions (CreateTopics v7;
// one that exists already is kept as it is) and waits until Metadata v12
// shows every partition. It returns the topic's id.
func ensureTopic(addr, topic string, partitions int32) ([16]byte, error) {
	c, err := dial(addr)
	if err != nil {
		return [16]byte{}, err
	}
	defer c.nc.Close()
	c.arm(3 * time.Minute)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	req.TimeoutMillis = 120000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, 1
	req.Topics = []kmsg.CreateTopicsRequestTopic{t}
	resp, err := c.do(req)
	if err != nil {
		return [16]byte{}, fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, rt := range resp.(*kmsg.CreateTopicsResponse).Topics {
		if rt.ErrorCode != 0 && rt.ErrorCode != errTopicAlreadyExists {
			return [16]byte{}, fmt.Errorf("create topic %s: error %d", topic, rt.ErrorCode)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mreq := kmsg.NewPtrMetadataRequest()
		mreq.Version = 12
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		mreq.Topics = []kmsg.MetadataRequestTopic{mt}
		resp, err := c.do(mreq)
		if err != nil {
			return [16]byte{}, fmt.Errorf("metadata of %s: %w", topic, err)
		}
		ts := resp.(*kmsg.MetadataResponse).Topics
		if len(ts) == 1 && ts[0].ErrorCode == 0 && len(ts[0].Partitions) == int(partitions) && ts[0].TopicID != ([16]byte{}) {
			return ts[0].TopicID, nil
		}
		if time.Now().After(deadline) {
			return [16]byte{}, fmt.Errorf("topic %s: metadata %+v", topic, ts)
		}
	}
}
