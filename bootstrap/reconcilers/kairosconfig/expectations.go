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
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
)

// expectations remember the controller's own writes until the cache shows
// them: the versions of a config our writes replaced (ownwrites), and the
// token record we deleted, so that a reconcile on a stale cache neither
// adds the finalizer again, renders again nor revokes again. Each entry
// lives from a write to the next reconcile of the same config, which the
// write's own watch event triggers.
type expectations struct {
	*ownwrites.Versions
	// revoked holds, per config, the ID of the token whose record we
	// deleted: a cached record with that ID is already gone.
	revoked ownwrites.Children
}

func newExpectations() *expectations {
	return &expectations{Versions: ownwrites.New()}
}

// revokedToken records that the record of token id was deleted.
func (e *expectations) revokedToken(config types.NamespacedName, id string) {
	e.revoked.Wrote(config, id)
}

// tokenRevoked reports whether a cached record of token id was already
// deleted by us.
func (e *expectations) tokenRevoked(config types.NamespacedName, id string) bool {
	return e.revoked.Pending(config, id)
}

// tokenRecordGone drops the revocation once the cache has no record.
func (e *expectations) tokenRecordGone(config types.NamespacedName) {
	e.revoked.Seen(config)
}

// forget drops everything about a config that is gone.
func (e *expectations) forget(config types.NamespacedName) {
	e.Forget(config)
	e.revoked.Seen(config)
}
