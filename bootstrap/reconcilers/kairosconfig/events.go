/*
Copyright 2026 The Cozystack Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package kairosconfig

import (
	corev1 "k8s.io/api/core/v1"
)

// The Events a person watching a KairosConfig (kubectl describe) sees: one
// per change the reconcile made, emitted right after it, so that a requeue
// or a resync never repeats one. Their notes never carry the token, its ID
// or the bootstrap data.
const (
	// BootstrapDataReadyEvent: the bootstrap data Secret was written with
	// a new token.
	BootstrapDataReadyEvent = "BootstrapDataReady"
	// BootstrapTokenRevokedEvent: the token was deleted from the workload
	// cluster, once the node joined or when its Machine goes.
	BootstrapTokenRevokedEvent = "BootstrapTokenRevoked"
)

// recordDataReady is the Event of the bootstrap data written.
func (r *Reconciler) recordDataReady(s *scope) {
	r.Recorder.Eventf(s.config, nil, corev1.EventTypeNormal, BootstrapDataReadyEvent, "Render",
		"Wrote the bootstrap data Secret %s (join mode %s)", s.config.Name, joinMode(s.config))
}

// recordRevoked is the Event of the token deleted from the workload
// cluster: why it ended, "" when its Machine is being deleted.
func (r *Reconciler) recordRevoked(s *scope, why tokenEnded) {
	because := "its Machine is being deleted"
	switch why {
	case endedJoined:
		because = "the node joined"
	case endedKeepAlive:
		because = "the node had not joined when its keep-alive was over; no new token is minted for this Machine"
	}
	r.Recorder.Eventf(s.config, nil, corev1.EventTypeNormal, BootstrapTokenRevokedEvent, "Revoke",
		"Revoked the bootstrap token in the workload cluster: %s", because)
}
