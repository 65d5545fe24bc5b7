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

// Package v1alpha1 holds the WorkerClass API (group cozystack.io): the
// cluster-scoped WorkerClass offered by the hoster, the WorkerPlatform
// singleton that configures platform defaults, and PoolSettings, the
// class-relevant fields of a tenant worker pool.
//
// Presence is part of this API: a nil pointer, map or slice means "not
// supplied", while an explicitly empty scalar, {} or [] is a supplied value.
// Fields where that difference matters use pointers or the omitzero JSON
// option, which keeps an empty non-nil map or slice on the wire.
//
// +kubebuilder:object:generate=true
// +groupName=cozystack.io
package v1alpha1
