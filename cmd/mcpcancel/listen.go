package main

import "github.com/mcpcancel/mcpcancel/internal/cmdline"

// closeListeners closes what cmdline.ListenAll opened, for a command that
// returns before serving them; closing one already served is harmless.
func closeListeners(addrs ...*cmdline.Addr) {
	for _, a := range addrs {
		if a.Lis != nil {
			a.Lis.Close()
		}
	}
}
