//go:build !linux

package persist

func pageOut(string) int64 { return 0 }

func absDir(dir string) string { return dir }
