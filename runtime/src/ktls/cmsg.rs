//! Reading and writing records with their type after the hand-off: `recvmsg`/`sendmsg`
//! with the `TLS_GET_RECORD_TYPE`/`TLS_SET_RECORD_TYPE` control message.
//!
//! A plain `read` fails with `EIO` when the next record is not application data; the
//! reader then takes it here, with its type, and `control` says what it means. Every
//! `unsafe` of the kTLS data path is in this file; the buffer and control-message lengths
//! it relies on are asserted.

use std::io;
use std::mem;
use std::os::fd::RawFd;

use super::{CT_ALERT, CT_APPLICATION_DATA};

/// Room for one control message: a `cmsghdr` and its data, aligned as the header.
#[repr(C)]
union CmsgBuf {
    hdr: libc::cmsghdr,
    buf: [u8; 64],
}

/// Bytes of a control message carrying one byte of data (the record type), with padding.
fn space_for_one_byte() -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument; it touches no memory.
    let n = unsafe { libc::CMSG_SPACE(1) } as usize;
    let have = mem::size_of::<CmsgBuf>();
    assert!(n <= have, "kTLS: a 1-byte cmsg needs {n} bytes, the buffer has {have}");
    n
}

/// A `msghdr` over `iov` (one buffer) and the first `controllen` bytes of `cbuf`. It
/// holds their addresses: the caller keeps both alive and unmoved while the kernel uses it.
fn msghdr(iov: &mut libc::iovec, cbuf: &mut CmsgBuf, controllen: usize) -> libc::msghdr {
    assert!(
        controllen <= mem::size_of::<CmsgBuf>(),
        "kTLS: {controllen} bytes of control messages asked of the buffer"
    );
    // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = (cbuf as *mut CmsgBuf).cast();
    msg.msg_controllen = controllen as _;
    msg
}

/// `recvmsg` with a control buffer: reads the next record (or application data) and its
/// type. `Ok(None)`: nothing ready (EAGAIN). Never blocks.
pub fn recv_record(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<(u8, usize)>> {
    assert!(!buf.is_empty(), "kTLS recv_record: an empty buffer would read nothing");
    space_for_one_byte();
    // SAFETY: zeroed msghdr/cmsg buffers are valid values; `iov` points to `buf` and
    // `msg_control` to `cbuf`, both live for the whole call, with their true lengths.
    // CMSG_FIRSTHDR/NXTHDR walk only the `msg_controllen` bytes the kernel filled in
    // (asserted within `cbuf`), and each header's data is read only when its length
    // covers the byte read.
    unsafe {
        let mut cbuf: CmsgBuf = mem::zeroed();
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut msg = msghdr(&mut iov, &mut cbuf, mem::size_of::<CmsgBuf>());
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e);
        }
        assert!(n as usize <= buf.len(), "kTLS recvmsg: {n} bytes read into a buffer of {}", buf.len());
        assert!(
            msg.msg_controllen as usize <= mem::size_of::<CmsgBuf>(),
            "kTLS recvmsg: {} bytes of control messages in a buffer of {}",
            msg.msg_controllen,
            mem::size_of::<CmsgBuf>()
        );
        let mut ct = CT_APPLICATION_DATA;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS && (*c).cmsg_type == libc::TLS_GET_RECORD_TYPE {
                assert!(
                    (*c).cmsg_len as usize >= libc::CMSG_LEN(1) as usize,
                    "kTLS recvmsg: a record-type cmsg of {} bytes holds no type byte",
                    (*c).cmsg_len
                );
                ct = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "TLS record type truncated"));
        }
        Ok(Some((ct, n as usize)))
    }
}

/// Sends a TLS alert record through the kernel (`TLS_SET_RECORD_TYPE` cmsg). Never blocks.
pub fn send_alert(fd: RawFd, level: u8, desc: u8) -> io::Result<()> {
    let mut payload = [level, desc];
    let room = space_for_one_byte();
    // SAFETY: as in `recv_record`: `iov` and `msg_control` point to live local buffers
    // with their lengths; `msg_controllen` (`room`) is asserted within `cbuf`, so
    // CMSG_FIRSTHDR is not null and the header and its one data byte lie inside `cbuf`.
    unsafe {
        let mut cbuf: CmsgBuf = mem::zeroed();
        let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
        let msg = msghdr(&mut iov, &mut cbuf, room);
        let c = libc::CMSG_FIRSTHDR(&msg);
        assert!(!c.is_null(), "kTLS sendmsg: no room for the record-type cmsg in {room} bytes");
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = CT_ALERT;
        if libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
