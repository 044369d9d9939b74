package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxFrame bounds a request frame; a larger one closes the connection.
const maxFrame = 100 << 20

// served are the API keys the server answers; ApiVersions advertises each
// from version 0 to the highest kmsg knows.
var served = []int16{
	0x03, // Metadata
	0x08, // OffsetCommit
	0x0a, // FindCoordinator
	0x0b, // JoinGroup
	0x0c, // Heartbeat
	0x0d, // LeaveGroup
	0x0e, // SyncGroup
	0x0f, // DescribeGroups
	0x12, // ApiVersions
	0x13, // CreateTopics
	0x44, // ConsumerGroupHeartbeat
}

func maxVersion(key int16) int16 {
	if req := kmsg.RequestForKey(key); req != nil {
		return req.MaxVersion()
	}
	return -1
}

// server is the naive server's state: its own address, the topics created
// through it and the classic groups.
type server struct {
	host string
	port int32

	mu     sync.Mutex
	topics map[string]topic

	groups sync.Map // group id -> *group
}

type topic struct {
	id         [16]byte
	partitions int32
}

func newServer(addr *net.TCPAddr) *server {
	return &server{host: addr.IP.String(), port: int32(addr.Port), topics: map[string]topic{}}
}

// serve accepts connections until ln is closed, one goroutine each.
func (s *server) serve(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		go s.conn(nc)
	}
}

// conn reads a request, answers it and writes the answer, in a loop, until
// the client closes the connection or sends something it cannot read.
func (s *server) conn(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	var frame, out []byte
	for {
		var err error
		frame, err = readFrame(br, frame)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Printf("naive: %s: %v", nc.RemoteAddr(), err)
			}
			return
		}
		corr, req, err := parseRequest(frame)
		if err != nil {
			log.Printf("naive: %s: %v", nc.RemoteAddr(), err)
			return
		}
		out = appendResponse(out[:0], corr, s.handle(req))
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}

// readFrame reads one size-prefixed frame into buf's storage.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(br, buf)
	return buf, err
}

// parseRequest reads a request header (v1, or v2 for flexible versions)
// and decodes the body with kmsg. A version the server does not know
// decodes as ApiVersions v0, which is answered with UNSUPPORTED_VERSION as
// Kafka does; any other unknown key or version is an error.
func parseRequest(frame []byte) (int32, kmsg.Request, error) {
	if len(frame) < 10 {
		return 0, nil, errors.New("short request header")
	}
	key := int16(binary.BigEndian.Uint16(frame))
	version := int16(binary.BigEndian.Uint16(frame[2:]))
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	idLen := int16(binary.BigEndian.Uint16(frame[8:]))
	body := frame[10:]
	if idLen > 0 {
		if int(idLen) > len(body) {
			return corr, nil, errors.New("short client id")
		}
		body = body[idLen:]
	}
	req := kmsg.RequestForKey(key)
	if req == nil || version < 0 || version > maxVersion(key) {
		if key == 0x12 {
			return corr, &unsupportedAPIVersions{}, nil
		}
		return corr, nil, fmt.Errorf("key %d version %d not served", key, version)
	}
	req.SetVersion(version)
	if req.IsFlexible() {
		var err error
		if body, err = skipTags(body); err != nil {
			return corr, nil, err
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return corr, nil, fmt.Errorf("key %d v%d: %w", key, version, err)
	}
	return corr, req, nil
}

// unsupportedAPIVersions stands for an ApiVersions request of a version
// the server cannot read.
type unsupportedAPIVersions struct{ kmsg.ApiVersionsRequest }

// skipTags skips a header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// appendResponse frames resp: size, correlation id, the header's empty
// tagged fields for a flexible version (never for ApiVersions), body.
func appendResponse(b []byte, corr int32, resp kmsg.Response) []byte {
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	if resp.IsFlexible() && resp.Key() != 0x12 {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// handle answers one request, waiting if the request must (a parked
// JoinGroup or SyncGroup).
func (s *server) handle(r kmsg.Request) kmsg.Response {
	switch req := r.(type) {
	case *unsupportedAPIVersions:
		resp := kmsg.NewPtrApiVersionsResponse() // v0
		resp.ErrorCode = 35                      // UNSUPPORTED_VERSION
		resp.ApiKeys = apiKeys()
		return resp
	case *kmsg.ApiVersionsRequest:
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = apiKeys()
		return resp
	case *kmsg.MetadataRequest:
		return s.metadata(req)
	case *kmsg.CreateTopicsRequest:
		return s.createTopics(req)
	case *kmsg.FindCoordinatorRequest:
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.NodeID, resp.Host, resp.Port = 0, s.host, s.port
		for _, k := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.Host, c.Port = k, 0, s.host, s.port
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	case *kmsg.HeartbeatRequest:
		return req.ResponseKind() // no error, no lookup
	case *kmsg.OffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Topics = make([]kmsg.OffsetCommitResponseTopic, len(req.Topics))
		for i, t := range req.Topics {
			rt := &resp.Topics[i]
			rt.Default()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			rt.Partitions = make([]kmsg.OffsetCommitResponseTopicPartition, len(t.Partitions))
			for j, p := range t.Partitions {
				rt.Partitions[j].Default()
				rt.Partitions[j].Partition = p.Partition
			}
		}
		return resp
	case *kmsg.JoinGroupRequest:
		return s.group(req.Group).join(req)
	case *kmsg.SyncGroupRequest:
		return s.group(req.Group).sync(req)
	case *kmsg.LeaveGroupRequest:
		return s.group(req.Group).leave(req)
	case *kmsg.DescribeGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, id := range req.Groups {
			resp.Groups = append(resp.Groups, s.group(id).describe())
		}
		return resp
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return consumerHeartbeat(req)
	}
	// Only the keys in served decode (ApiVersions advertises no others),
	// but a client may send another: answer with the body's defaults.
	return r.ResponseKind()
}

func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, len(served))
	for i, k := range served {
		keys[i].Default()
		keys[i].ApiKey, keys[i].MinVersion, keys[i].MaxVersion = k, 0, maxVersion(k)
	}
	return keys
}

func (s *server) metadata(req *kmsg.MetadataRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 0, s.host, s.port
	resp.Brokers = []kmsg.MetadataResponseBroker{b}
	resp.ControllerID = 0
	resp.ClusterID = kmsg.StringPtr("naive")
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	if req.Topics == nil {
		for name := range s.topics {
			names = append(names, name)
		}
	}
	for _, t := range req.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		t, ok := s.topics[name]
		if !ok {
			mt.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		mt.TopicID = t.id
		for p := range t.partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader, mp.LeaderEpoch = p, 0, 0
			mp.Replicas, mp.ISR = []int32{0}, []int32{0}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func (s *server) createTopics(req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rt := range req.Topics {
		ct := kmsg.NewCreateTopicsResponseTopic()
		ct.Topic = rt.Topic
		ct.NumPartitions, ct.ReplicationFactor = rt.NumPartitions, 1
		if t, ok := s.topics[rt.Topic]; ok {
			ct.ErrorCode, ct.TopicID = 36, t.id // TOPIC_ALREADY_EXISTS
		} else {
			if ct.NumPartitions <= 0 {
				ct.NumPartitions = 1
			}
			var id [16]byte
			rand.Read(id[:])
			if !req.ValidateOnly {
				s.topics[rt.Topic] = topic{id, ct.NumPartitions}
			}
			ct.TopicID = id
		}
		resp.Topics = append(resp.Topics, ct)
	}
	return resp
}

// consumerHeartbeat answers a ConsumerGroupHeartbeat without any group: a
// join (epoch 0) gets epoch 1 and an empty assignment, a leave (-1 or -2)
// its epoch back, any other heartbeat its own epoch and no assignment
// (unchanged).
func consumerHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	id := req.MemberID
	if id == "" {
		var b [16]byte
		rand.Read(b[:])
		id = fmt.Sprintf("%x", b)
	}
	resp.MemberID = kmsg.StringPtr(id)
	resp.HeartbeatIntervalMillis = 5000
	resp.MemberEpoch = req.MemberEpoch
	if req.MemberEpoch == 0 {
		resp.MemberEpoch = 1
		resp.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}}
	}
	return resp
}

func (s *server) group(id string) *group {
	if g, ok := s.groups.Load(id); ok {
		return g.(*group)
	}
	g, _ := s.groups.LoadOrStore(id, &group{id: id})
	return g.(*group)
}
