module github.com/sandbox-gpu/sandbox-gpu/test

go 1.26
