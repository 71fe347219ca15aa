module github.com/railmq/railmq

go 1.26.8
