import streamlit as st
