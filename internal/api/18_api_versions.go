package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.ApiVersions, 0, 5, (*Handler).apiVersions) }

func (h *Handler) apiVersions(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.ApiVersionsRequest)
	self := table[int16(kmsg.ApiVersions)]

	// A version above ours is answered as Kafka does (KIP-511): a v0 body
	// with UNSUPPORTED_VERSION and our ApiVersions range, so the client
	// retries at a version we serve.
	if req.Version > self.Max {
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = self.Key, self.Min, self.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
		return resp, nil
	}
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Version >= 3 && (!validSoftwareField(req.ClientSoftwareName) || !validSoftwareField(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	// v5 names the cluster and node the client believes it reached
	// (KIP-1242); a mismatch means its metadata is stale.
	if req.Version >= 5 {
		hasCluster, hasNode := req.ClusterID != nil, req.NodeID != -1
		switch {
		case hasCluster != hasNode:
			resp.ErrorCode = kerr.InvalidRequest.Code
			return resp, nil
		case hasCluster && (*req.ClusterID != h.clusterID() || req.NodeID != h.b.NodeID()):
			resp.ErrorCode = kerr.RebootstrapRequired.Code
			return resp, nil
		}
	}
	for _, v := range Versions() {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = v.Key, v.Min, v.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp, nil
}

// validSoftwareField applies Kafka's pattern for the client software name
// and version: [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
func validSoftwareField(s string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
