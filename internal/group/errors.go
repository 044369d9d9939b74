package group

import "github.com/twmb/franz-go/pkg/kerr"

// Error codes, named once so the handlers read like Kafka's.
var (
	errOffsetMetadataTooLarge  = kerr.OffsetMetadataTooLarge.Code
	errCoordinatorNotAvailable = kerr.CoordinatorNotAvailable.Code
	errNotCoordinator          = kerr.NotCoordinator.Code
	errIllegalGeneration       = kerr.IllegalGeneration.Code
	errInconsistentProtocol    = kerr.InconsistentGroupProtocol.Code
	errInvalidGroupID          = kerr.InvalidGroupID.Code
	errUnknownMemberID         = kerr.UnknownMemberID.Code
	errInvalidSessionTimeout   = kerr.InvalidSessionTimeout.Code
	errRebalanceInProgress     = kerr.RebalanceInProgress.Code
	errNonEmptyGroup           = kerr.NonEmptyGroup.Code
	errGroupIDNotFound         = kerr.GroupIDNotFound.Code
	errMemberIDRequired        = kerr.MemberIDRequired.Code
	errGroupMaxSizeReached     = kerr.GroupMaxSizeReached.Code
	errFencedInstanceID        = kerr.FencedInstanceID.Code
	errGroupSubscribedToTopic  = kerr.GroupSubscribedToTopic.Code
	errUnsupportedVersion      = kerr.UnsupportedVersion.Code
)
