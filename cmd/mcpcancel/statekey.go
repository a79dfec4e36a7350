package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// loadStateKey reads --state-key-file: 32 bytes as 64 hex digits.
func (o *gatewayFlags) loadStateKey() error {
	if o.stateKeyFile == "" {
		return nil
	}
	b, err := os.ReadFile(o.stateKeyFile)
	if err != nil {
		return fmt.Errorf("--state-key-file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return cmdline.Usage(fmt.Errorf("--state-key-file: %s must hold 64 hex digits (a 32-byte key)", o.stateKeyFile))
	}
	o.stateKey = key
	return nil
}
