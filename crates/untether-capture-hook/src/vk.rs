//! vk
