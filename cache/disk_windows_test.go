//go:build windows

package cache

import "errors"

func mkfifo(string) error { return errors.New("no FIFOs on Windows") }
