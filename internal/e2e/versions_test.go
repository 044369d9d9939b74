package e2e

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/api"
)

// TestEveryAdvertisedVersionIsServed sends a minimal request at every
// version in the supported-versions table and requires a reply that
// decodes at that version: nothing is advertised that is broken.
func TestEveryAdvertisedVersionIsServed(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "versions", 1)
	topicID := topicIDOf(t, a.Addr(), "versions")

	rc := dialRaw(t, a.Addr())
	for _, vr := range api.Versions() {
		for v := vr.Min; v <= vr.Max; v++ {
			req := kmsg.RequestForKey(vr.Key)
			req.SetVersion(v)
			fillMinimal(req, topicID)
			resp, err := rc.do(req)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(vr.Key), v, err)
			}
			if resp.GetVersion() != v {
				t.Fatalf("%s v%d: reply decoded at v%d", kmsg.NameForKey(vr.Key), v, resp.GetVersion())
			}
			if ec, ok := topLevelError(resp); ok && ec != 0 {
				t.Errorf("%s v%d: error code %d", kmsg.NameForKey(vr.Key), v, ec)
			}
		}
	}
}

// fillMinimal gives requests that need content something valid to act on.
func fillMinimal(req kmsg.Request, topicID [16]byte) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		r.ClientSoftwareName, r.ClientSoftwareVersion = "test", "1.0"
	case *kmsg.ProduceRequest:
		r.Acks = 1 // acks=0 has no reply
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = "versions", topicID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = buildBatch("v")
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.FetchRequest:
		r.MaxWaitMillis = 0
		r.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "versions", topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.ListOffsetsRequest:
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "versions"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.MetadataRequest:
		if r.Version >= 1 {
			r.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("versions")}}
		}
	case *kmsg.CreateTopicsRequest:
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "created", 1, 1
		r.ValidateOnly = r.Version >= 1
		r.Topics = append(r.Topics, rt)
	case *kmsg.DescribeConfigsRequest:
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "versions"
		r.IncludeSynonyms, r.IncludeDocumentation = true, true
		r.Resources = append(r.Resources, rr)
	case *kmsg.AlterConfigsRequest:
		rr := kmsg.NewAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "versions"
		rr.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("3600000")}}
		r.ValidateOnly = true
		r.Resources = append(r.Resources, rr)
	case *kmsg.IncrementalAlterConfigsRequest:
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "versions"
		rr.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("3600000")}}
		r.ValidateOnly = true
		r.Resources = append(r.Resources, rr)
	case *kmsg.DeleteRecordsRequest:
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "versions"
		rt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 0}}
		r.Topics = append(r.Topics, rt)
	case *kmsg.ElectLeadersRequest:
		r.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "versions", Partitions: []int32{0}}}
	case *kmsg.AlterPartitionAssignmentsRequest:
		// A cancellation, with none under way.
		rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		rt.Topic = "versions"
		rt.Partitions = []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0}}
		r.Topics = append(r.Topics, rt)
	case *kmsg.OffsetForLeaderEpochRequest:
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "versions"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	}
}

// topLevelError returns a response's top-level error code, for the
// responses that have one.
func topLevelError(resp kmsg.Response) (int16, bool) {
	switch r := resp.(type) {
	case *kmsg.ApiVersionsResponse:
		return r.ErrorCode, true
	case *kmsg.FetchResponse:
		return r.ErrorCode, true
	case *kmsg.InitProducerIDResponse:
		return r.ErrorCode, true
	// The config and record APIs answer per resource; the one asked must
	// succeed.
	case *kmsg.DescribeConfigsResponse:
		if len(r.Resources[0].Configs) == 0 {
			return -1, true
		}
		return r.Resources[0].ErrorCode, true
	case *kmsg.AlterConfigsResponse:
		return r.Resources[0].ErrorCode, true
	case *kmsg.IncrementalAlterConfigsResponse:
		return r.Resources[0].ErrorCode, true
	case *kmsg.DeleteRecordsResponse:
		return r.Topics[0].Partitions[0].ErrorCode, true
	// A single node's partition has one replica, which leads; it has no
	// reassignment to cancel and lists none.
	case *kmsg.ElectLeadersResponse:
		if r.ErrorCode != 0 || len(r.Topics) != 1 || r.Topics[0].Partitions[0].ErrorCode != kerr.ElectionNotNeeded.Code {
			return -1, true
		}
		return 0, true
	case *kmsg.AlterPartitionAssignmentsResponse:
		if r.ErrorCode != 0 || len(r.Topics) != 1 || r.Topics[0].Partitions[0].ErrorCode != kerr.NoReassignmentInProgress.Code {
			return -1, true
		}
		return 0, true
	case *kmsg.ListPartitionReassignmentsResponse:
		if r.ErrorCode != 0 || len(r.Topics) != 0 {
			return -1, true
		}
		return 0, true
	}
	return 0, false
}
