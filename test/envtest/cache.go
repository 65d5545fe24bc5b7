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

package envtest

import (
	"errors"
	"os"
	"path/filepath"
)

// CacheEnv overrides the cache directory (CacheDir).
const CacheEnv = "KUBEVIRT_WORKERS_CACHE"

// CacheDir is the project's cache outside the checkout, where the hack
// scripts build the binaries and tools and the tests write what they derive
// from the module cache: $KUBEVIRT_WORKERS_CACHE when set, otherwise
// kubevirt-workers in the user cache ($XDG_CACHE_HOME, else ~/.cache). The
// scripts compute the same (CACHE_ROOT in hack/*.sh; TestCacheDirIsTheScripts'
// keeps them equal), so every cache path follows the override.
func CacheDir() (string, error) {
	if dir := os.Getenv(CacheEnv); dir != "" {
		return dir, nil
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "kubevirt-workers"), nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("neither " + CacheEnv + ", XDG_CACHE_HOME nor HOME is set: no cache directory")
	}
	return filepath.Join(home, ".cache", "kubevirt-workers"), nil
}
