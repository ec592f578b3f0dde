//! The sockets under `lllm-mock`: a listener that turns Nagle off and wraps
//! each connection so a handler can reset it (the `reset` and `timeout`
//! faults), which axum alone cannot do: a handler always returns a response.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Accepts TCP connections with Nagle off, each wrapped so a handler can
/// reset it.
pub struct Listener {
    pub inner: TcpListener,
}

impl axum::serve::Listener for Listener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, address)) => {
                    let _ = stream.set_nodelay(true);
                    let connection = Connection {
                        stream,
                        reset: Arc::new(AtomicBool::new(false)),
                    };
                    return (connection, address);
                }
                // Out of file descriptors and the like: wait, as axum does.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A TCP connection that fails every write once reset: hyper then drops it
/// without having written a byte of the response, and the zero linger makes
/// the close an RST, which the client sees as a connection reset.
pub struct Connection {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Connection {
    fn check(&self) -> std::io::Result<()> {
        if self.reset.load(Ordering::Relaxed) {
            let _ = self.stream.set_zero_linger();
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "lllm-mock: scripted reset",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(context, buffer)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

/// A handler's hold on its connection (axum's `ConnectInfo`).
#[derive(Clone)]
pub struct ConnectionHandle {
    reset: Arc<AtomicBool>,
}

impl ConnectionHandle {
    pub fn reset(&self) {
        self.reset.store(true, Ordering::Relaxed);
    }
}

impl Connected<IncomingStream<'_, Listener>> for ConnectionHandle {
    fn connect_info(stream: IncomingStream<'_, Listener>) -> Self {
        ConnectionHandle {
            reset: stream.io().reset.clone(),
        }
    }
}
